//! `wanda completions SHELL` and `wanda man`: shell completions and man pages made from the
//! command's own clap definition, so they say what `--help` says.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, CommandFactory};
use clap_complete::Shell;

/// Arguments of `wanda completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Prints the completion script of `args.shell` to stdout.
pub fn run(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut command = super::Cli::command();
    clap_complete::generate(args.shell, &mut command, "wanda", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `wanda man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write `wanda.1` and a page per subcommand (`wanda-run.1`, …) into this folder instead
    /// of printing `wanda.1`.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Prints the man page, or writes every page into `args.out`.
pub fn run_man(args: ManArgs) -> anyhow::Result<ExitCode> {
    let Some(dir) = args.out else {
        clap_mangen::Man::new(super::Cli::command()).render(&mut std::io::stdout())?;
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let mut pages = Vec::new();
    collect_pages(super::Cli::command(), &mut pages)?;
    for (name, page) in &pages {
        let path = dir.join(name);
        wanda::sys::atomic::write_atomic(&path, page)
            .with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    eprintln!("wrote {} man pages to {}", pages.len(), dir.display());
    Ok(ExitCode::SUCCESS)
}

/// The page of `command` and of each of its visible subcommands (all levels), named as `man`
/// finds them (`wanda-run.1`, `wanda-bench-gemm.1`).
fn collect_pages(command: clap::Command, pages: &mut Vec<(String, Vec<u8>)>) -> anyhow::Result<()> {
    let mut command = command;
    command.build();
    // clap's own `help` subcommand is `--help` again: no page of its own.
    let shown = command
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help");
    for sub in shown {
        collect_pages(sub.clone().version(env!("CARGO_PKG_VERSION")), pages)?;
    }
    let man = clap_mangen::Man::new(command);
    let mut page = Vec::new();
    man.render(&mut page)?;
    pages.push((man.get_filename(), page));
    Ok(())
}
