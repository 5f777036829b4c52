//! The hub token never leaves the request headers: a whole pipeline run against a private
//! repository on the fake hub, with `HF_TOKEN` set, and a run that the hub refuses, leave no
//! trace of it in stdout, stderr, run records, memory logs, saved recipes or any other file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use wanda::pipeline::RunRecord;

use crate::common::fake_hub::{FakeHub, FakeRepo, REPO};
use crate::common::{save_tiny_hf_folder, tiny_text};

const SECRET: &str = "hf_WandaTestSecret8Kq3ZpL";

/// Every file below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if path.is_file() {
            out.push(path);
        }
    }
    out
}

fn run(dir: &Path, hub: &FakeHub, pipeline: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args(["run", pipeline])
        .current_dir(dir)
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HF_HOME", dir.join("hf-home"))
        .env("HF_TOKEN", SECRET)
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap()
}

#[test]
fn the_hub_token_appears_in_no_output_record_recipe_or_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let folder = d.join("upload");
    save_tiny_hf_folder(&folder, 6);
    let files = walk(&folder)
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    std::fs::remove_dir_all(&folder).unwrap();
    let hub = FakeHub::start(FakeRepo {
        files,
        token: Some(SECRET.to_string()),
        corrupt: false,
    });
    std::fs::write(d.join("calib.txt"), tiny_text(400)).unwrap();
    std::fs::write(d.join("eval.txt"), tiny_text(300)).unwrap();
    let pipeline = |name: &str, repo: &str| {
        format!(
            "name: {name}
seed: 0
device: cpu
model: {{ hub: {repo} }}
calibration: {{ text: calib.txt, nsamples: 4, seqlen: 16 }}
evaluation: {{ text: eval.txt, seqlen: 16 }}
stages:
  load: {{}}
  calibrate: {{}}
  prune: {{ method: wanda, sparsity: 0.5 }}
  eval: {{}}
  save: {{ model: true }}
"
        )
    };
    std::fs::write(d.join("private.yaml"), pipeline("private", REPO)).unwrap();
    std::fs::write(d.join("refused.yaml"), pipeline("refused", "org/not-there")).unwrap();

    let ok = run(d, &hub, "private.yaml");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let record = walk(&d.join("results/private"))
        .into_iter()
        .find(|p| p.ends_with("run.json"))
        .expect("the cell finished");
    assert!(RunRecord::read(&record)
        .unwrap()
        .metrics
        .perplexity
        .is_some());
    let bearer = format!("Bearer {SECRET}");
    assert!(
        hub.seen()
            .iter()
            .any(|s| s.authorization.as_deref() == Some(bearer.as_str())),
        "the token was sent to the hub (else this test proves nothing)"
    );
    let refused = run(d, &hub, "refused.yaml");
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("org/not-there"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let mut looked_at = 0;
    for (what, bytes) in [
        ("stdout of the run", &ok.stdout),
        ("stderr of the run", &ok.stderr),
        ("stdout of the refused run", &refused.stdout),
        ("stderr of the refused run", &refused.stderr),
    ] {
        assert!(
            !String::from_utf8_lossy(bytes).contains(SECRET),
            "token in {what}"
        );
        looked_at += 1;
    }
    let needle = SECRET.as_bytes();
    for path in walk(d) {
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "token in {}",
            path.display()
        );
        looked_at += 1;
    }
    // The run.json, memory log, recipe, sparsity report, saved model and the hub cache.
    assert!(looked_at > 15, "only {looked_at} outputs looked at");
    eprintln!("hub token: absent from {looked_at} outputs (4 streams, the rest files)");
    assert!(walk(d)
        .iter()
        .any(|p| p.ends_with("model/wanda_recipe.yaml")));
}
