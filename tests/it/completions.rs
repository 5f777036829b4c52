//! `wanda completions` and `wanda man`: scripts the shells load and pages `man` reads, covering
//! every subcommand.

use std::process::Command;

fn wanda(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn each_shell_gets_a_script_that_completes_subcommands_and_their_flags() {
    let bash = wanda(&["completions", "bash"]);
    assert!(bash.contains("complete -F _wanda"), "{bash:.200}");
    assert!(bash.contains("--dry-run") && bash.contains("report"));
    let zsh = wanda(&["completions", "zsh"]);
    assert!(zsh.starts_with("#compdef wanda"), "{zsh:.200}");
    let fish = wanda(&["completions", "fish"]);
    assert!(fish.contains("complete -c wanda") && fish.contains("rerun"));
    let refused = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("possible values"));
}

#[test]
fn man_prints_the_page_and_writes_one_per_subcommand() {
    let page = wanda(&["man"]);
    assert!(page.contains(".TH wanda 1"), "{page:.200}");
    assert!(
        page.contains("wanda\\-run(1)"),
        "the page names the subcommands' pages"
    );
    let dir = tempfile::tempdir().unwrap();
    wanda(&["man", "--out", dir.path().to_str().unwrap()]);
    let run = std::fs::read_to_string(dir.path().join("wanda-run.1")).unwrap();
    assert!(run.contains(".TH wanda-run 1"), "{run:.200}");
    assert!(
        run.contains("\\-\\-dry\\-run"),
        "the page holds the subcommand's flags"
    );
    for page in ["wanda.1", "wanda-report.1", "wanda-bench-gemm.1"] {
        assert!(dir.path().join(page).exists(), "{page}");
    }
    let help_pages = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("help")
        })
        .count();
    assert_eq!(help_pages, 0, "clap's `help` subcommand gets no page");
}
