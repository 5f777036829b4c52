//! `wanda rerun RUN_JSON`: re-executes exactly the cell a run record describes — its resolved
//! config, seed and device — and compares the perplexity with the recorded one.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use wanda::memory::device::{DeviceChoice, DeviceSpec};
use wanda::pipeline::plan::{validate_source, ValidateOptions};
use wanda::pipeline::record::Versions;
use wanda::pipeline::RunRecord;

use super::run::{execute, RunArgs};

/// Arguments of `wanda rerun`.
#[derive(Debug, clap::Args)]
pub struct RerunArgs {
    /// The run.json of the cell to run again.
    pub record: PathBuf,
    /// Where the new cell goes (default: `rerun/` inside the recorded cell's folder).
    #[arg(long)]
    pub results: Option<PathBuf>,
}

/// Runs `wanda rerun`.
pub fn run(args: RerunArgs) -> anyhow::Result<ExitCode> {
    let old = RunRecord::read(&args.record)?;
    let pipeline_file = old.cell.pipeline_file.clone().with_context(|| {
        format!(
            "`{}` does not name its pipeline file (written by an older wanda); run the pipeline with `--only {}` instead",
            args.record.display(),
            old.cell.id
        )
    })?;
    // The record's config is the cell's resolved pipeline without name and device.
    let mut config = old.config.clone();
    config["name"] = old.cell.pipeline.clone().into();
    // The device the cell ran on, from its label (`cpu (ndarray f32)`, `cuda:0 (bf16)`, …).
    let device = DeviceChoice::from_label(&old.effective.device)
        .map_or_else(|| DeviceSpec::Auto.to_string(), |choice| choice.to_string());
    config["device"] = device.into();
    let text = serde_saphyr::to_string(&config)?;
    // Validated as if it were the original file, so relative paths resolve as they did.
    let plan =
        validate_source(&text, &pipeline_file, &ValidateOptions::default()).map_err(|e| {
            anyhow::Error::new(e.generated(&format!("the config in {}", args.record.display())))
        })?;
    anyhow::ensure!(
        plan.cells.len() == 1 && plan.cells[0].id == old.cell.id,
        "the record's config no longer resolves to cell `{}` (this wanda's defaults differ from the ones that wrote it)",
        old.cell.id
    );
    let results = args.results.unwrap_or_else(|| {
        args.record
            .parent()
            .map_or_else(|| PathBuf::from("rerun"), |p| p.join("rerun"))
    });
    let results_dir = results.join(plan.name());
    let run_args = RunArgs {
        file: pipeline_file,
        set: Vec::new(),
        dry_run: false,
        only: None,
        cell_index: None,
        manifest: None,
        workers: None,
        on_changed: wanda::pipeline::runner::OnChanged::Redo,
        force: true,
        results,
        no_memory_log: false,
        budget: None,
    };
    let summary = execute(plan, &run_args, results_dir.clone())?;
    if let Some(reason) = summary.halted {
        eprintln!("halted: {reason}");
        return Ok(ExitCode::from(1));
    }
    let new = RunRecord::read(&RunRecord::path(&results_dir, &old.cell.id))?;
    match (old.metrics.perplexity, new.metrics.perplexity) {
        (Some(a), Some(b)) if a.to_bits() == b.to_bits() => {
            println!("perplexity {a} — identical to the record");
            Ok(ExitCode::SUCCESS)
        }
        (Some(a), Some(b)) => {
            println!(
                "perplexity {b}, recorded {a}: differs by {:.3e} relative{}",
                (b - a).abs() / a,
                code_change(&old.versions, &new.versions)
            );
            Ok(ExitCode::from(1))
        }
        _ => {
            println!("re-ran cell `{}` (no perplexity to compare)", old.cell.id);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Why a difference may be expected: the record came from other code than this binary.
fn code_change(old: &Versions, new: &Versions) -> String {
    let short = |c: &Option<String>| {
        c.as_deref().map_or("an unknown commit".to_string(), |c| {
            c.chars().take(12).collect()
        })
    };
    if old.git_commit != new.git_commit {
        format!(
            " (the record was written by wanda at {}, this is {}: the code changed in between)",
            short(&old.git_commit),
            short(&new.git_commit)
        )
    } else if old.wanda != new.wanda || old.burn != new.burn {
        format!(
            " (the record was written by wanda {} with burn {}, this is wanda {} with burn {})",
            old.wanda,
            old.burn.as_deref().unwrap_or("?"),
            new.wanda,
            new.burn.as_deref().unwrap_or("?")
        )
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(commit: Option<&str>, wanda: &str) -> Versions {
        Versions {
            record: 1,
            wanda: wanda.into(),
            burn: Some("0.21.0".into()),
            git_commit: commit.map(str::to_string),
        }
    }

    #[test]
    fn a_difference_names_the_commits_that_wrote_the_record_and_this_binary() {
        let old = versions(Some("841b5dddbe8a229a493f38518444613ef88835db"), "0.1.0");
        let new = versions(Some("dd2600d0000000000000000000000000000000aa"), "0.1.0");
        assert_eq!(
            code_change(&old, &new),
            " (the record was written by wanda at 841b5dddbe8a, this is dd2600d00000: the code changed in between)"
        );
        assert_eq!(code_change(&new, &new), "");
        let older = versions(None, "0.0.9");
        assert!(code_change(&older, &new).contains("an unknown commit"));
    }
}
