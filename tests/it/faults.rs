//! Faults during a run, on the tiny 12-cell sweep: SIGKILL again and again, a save that cannot
//! write, and inputs that change between a cell's run and the resume.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use wanda::pipeline::attempt::{Attempt, AttemptState};
use wanda::pipeline::RunRecord;

use crate::common::files_below;
use crate::run_cli::sweep_fixture;

fn wanda(pipeline: &Path, results: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wanda"));
    cmd.arg("run")
        .arg(pipeline)
        .arg("--results")
        .arg(results)
        .args(["--set", "save.model=true"]);
    cmd
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The cell folders below `results/tiny-sweep`, sorted.
fn cells(results: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(results.join("tiny-sweep"))
        .map(|e| {
            e.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// A record without what differs between two runs of the same cell (wall times, memory).
fn comparable(path: &Path) -> serde_json::Value {
    let mut value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let object = value.as_object_mut().unwrap();
    object.remove("timings");
    object.remove("memory");
    value
}

/// Every file below `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    files_below(dir)
        .into_iter()
        .map(|p| p.strip_prefix(dir).unwrap().to_path_buf())
        .collect()
}

#[test]
fn a_sweep_killed_again_and_again_resumes_to_the_files_of_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = sweep_fixture(dir.path());
    // The uninterrupted sweep, timed twice into fresh folders and the faster taken: the kill
    // delays below are fractions of it, and one run slowed by the other tests sharing the CPU
    // would stretch them until the killed sweeps finish on their own.
    let timed = |name: &str| {
        let folder = dir.path().join(name);
        let started = std::time::Instant::now();
        let out = wanda(&pipeline, &folder).output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        (folder, started.elapsed().as_millis().max(20) as u64)
    };
    let (clean, first) = timed("clean");
    let (_, second) = timed("clean-again");
    let whole = first.min(second);

    let killed = dir.path().join("killed");
    // Kill points from a seeded xorshift, between 1/80 and 1/4 of the uninterrupted sweep's
    // wall time after each start, so kills land in loading, calibration, pruning,
    // evaluation, saving and record writing alike. Should a run still finish on its own
    // before three kills landed (the timed runs slower than the killed ones), the killed
    // folder starts over with the delays halved.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let (mut kills, mut finished_on_its_own, mut scale) = (0, false, 1);
    for _ in 0..60 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let span = whole / scale;
        let delay = Duration::from_millis(span / 80 + state % (span / 4).max(1));
        let mut child = wanda(&pipeline, &killed)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success());
            if kills >= 3 || scale >= 16 {
                finished_on_its_own = true;
                break;
            }
            std::fs::remove_dir_all(&killed).unwrap();
            (kills, scale) = (0, scale * 2);
            continue;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
        // Whatever is there after a kill parses: records are written whole or not at all.
        for cell in cells(&killed) {
            let record = cell.join("run.json");
            if record.exists() {
                RunRecord::read(&record).unwrap();
            }
        }
    }
    let finished_before = cells(&killed)
        .iter()
        .filter(|c| c.join("run.json").exists())
        .count();
    let out = wanda(&pipeline, &killed).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));

    let (a, b) = (cells(&clean), cells(&killed));
    let names = |v: &[PathBuf]| -> Vec<String> {
        v.iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into())
            .collect()
    };
    assert_eq!(names(&a), names(&b), "the same cells");
    assert_eq!(a.len(), 12);
    let mut compared = 0;
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            files(x),
            files(y),
            "same files (no attempt marker, no partial model folder) in {}",
            y.display()
        );
        for file in files(x) {
            let (fx, fy) = (x.join(&file), y.join(&file));
            match file.to_str().unwrap() {
                "run.json" => assert_eq!(comparable(&fx), comparable(&fy), "{}", fy.display()),
                // Checkpoint times and RSS differ from run to run; the stages logged do not.
                "memory_log.csv" => {}
                _ => assert_eq!(
                    std::fs::read(&fx).unwrap(),
                    std::fs::read(&fy).unwrap(),
                    "{}",
                    fy.display()
                ),
            }
            compared += 1;
        }
    }
    assert!(
        kills >= 3,
        "only {kills} kill(s) landed before the sweep finished"
    );
    eprintln!(
        "kill and resume: {kills} SIGKILLs ({}, delays scaled by 1/{scale}), {finished_before} \
         of 12 cells finished before the final resume, {compared} files compared in 12 cells",
        if finished_on_its_own {
            "then a run finished on its own"
        } else {
            "all landed"
        }
    );
}

#[test]
fn a_save_that_cannot_write_leaves_nothing_a_later_run_takes_as_finished() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = sweep_fixture(dir.path());
    let results = dir.path().join("results");
    // Files may grow to 8 KiB: the record fits, the 18 KB checkpoint does not (EFBIG).
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -f 16; trap '' XFSZ; exec \"$@\"", "sh"])
        .arg(env!("CARGO_BIN_EXE_wanda"))
        .args(wanda(&pipeline, &results).get_args())
        .args(["--only", "wanda-0.4-unstructured"]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("stage `save`"), "{}", text(&out));
    let [cell] = cells(&results).try_into().unwrap();
    assert!(!cell.join("run.json").exists());
    let left: Vec<String> = std::fs::read_dir(&cell)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into())
        .collect();
    assert_eq!(left, ["attempt.json"], "no model folder, whole or partial");
    let attempt = Attempt::read(&cell.join("attempt.json")).unwrap();
    assert_eq!(attempt.state, AttemptState::Failed);
    assert!(
        attempt
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("save"),
        "{attempt:?}"
    );

    let out = wanda(&pipeline, &results)
        .args(["--only", "wanda-0.4-unstructured"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("1 cell(s) finished, 0 already finished"));
    assert!(cell.join("run.json").exists() && cell.join("model/model.safetensors").exists());
    assert!(!cell.join("attempt.json").exists());
}

#[test]
fn a_text_changed_since_a_cell_ran_is_redone_or_refused_by_option() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = sweep_fixture(dir.path());
    let results = dir.path().join("results");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_wanda"))
            .arg("run")
            .arg(&pipeline)
            .arg("--results")
            .arg(&results)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let before: Vec<RunRecord> = cells(&results)
        .iter()
        .map(|c| RunRecord::read(&c.join("run.json")).unwrap())
        .collect();

    let eval = dir.path().join("eval.txt");
    let mut changed = std::fs::read_to_string(&eval).unwrap();
    changed.push_str(" the cat sat");
    std::fs::write(&eval, changed).unwrap();

    let out = run(&["--on-changed", "refuse"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("was finished with other inputs: the evaluation text")
            && text(&out).contains("--on-changed redo"),
        "{}",
        text(&out)
    );
    for (cell, old) in cells(&results).iter().zip(&before) {
        assert_eq!(&RunRecord::read(&cell.join("run.json")).unwrap(), old);
    }

    let out = run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        text(&out).matches("evaluation text").count(),
        12,
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("12 cell(s) finished, 0 already finished"),
        "{}",
        text(&out)
    );
    let now = wanda::data::hash::sha256_file(&eval).unwrap();
    for cell in cells(&results) {
        let r = RunRecord::read(&cell.join("run.json")).unwrap();
        assert_eq!(r.hashes.evaluation.as_deref(), Some(now.as_str()));
    }
    let out = run(&[]);
    assert!(text(&out).contains("0 cell(s) finished, 12 already finished and skipped"));
}

/// Regression: a process killed after a cell's record landed but before it removed the cell's
/// `attempt.json` left the marker behind for good, since later runs skip finished cells (seen
/// as an extra `attempt.json` in the kill-and-resume test once cells got faster).
#[test]
fn a_finished_cells_marker_left_by_a_killed_process_is_removed_on_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = sweep_fixture(dir.path());
    let results = dir.path().join("results");
    let out = wanda(&pipeline, &results).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let cell = cells(&results).into_iter().next().expect("a finished cell");
    // A marker of a process that is gone: a child that has exited and been reaped.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let mut attempt = Attempt::start();
    attempt.pid = pid;
    attempt.write(&cell.join("attempt.json")).unwrap();
    // A failed attempt's marker says something a user needs; it stays.
    let other = cells(&results).into_iter().nth(1).expect("a second cell");
    Attempt::start()
        .failed("a forced re-run failed".into())
        .write(&other.join("attempt.json"))
        .unwrap();

    let out = wanda(&pipeline, &results).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("0 cell(s) finished, 12 already finished and skipped"),
        "{}",
        text(&out)
    );
    assert!(!cell.join("attempt.json").exists(), "stale marker removed");
    assert!(other.join("attempt.json").exists(), "failure marker kept");
}
