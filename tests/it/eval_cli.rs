//! `wanda eval` end to end on a tiny model: the JSON it prints matches the library's numbers.

use std::path::{Path, PathBuf};
use std::process::Command;

use wanda::eval::perplexity::perplexity;
use wanda::model::{self, ModelRef};

use crate::common::{
    assert_zero_refused, files_below, output_ok, save_tiny_hf_folder, tiny_text, B,
};

/// A tiny model folder (weights from `seed`) and a text of `words` words in a temp folder.
fn tiny_setup(seed: u64, words: usize) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("tiny");
    save_tiny_hf_folder(&folder, seed);
    let text_path = dir.path().join("text.txt");
    std::fs::write(&text_path, tiny_text(words)).unwrap();
    (dir, folder, text_path)
}

/// Runs `wanda` with `args`, then `--model FOLDER --text TEXT`, and returns its stdout; fails
/// the test with stderr when it does not succeed.
fn wanda_ok(args: &[&str], folder: &Path, text: &Path) -> Vec<u8> {
    let out = output_ok(
        Command::new(env!("CARGO_BIN_EXE_wanda"))
            .args(args)
            .arg("--model")
            .arg(folder)
            .arg("--text")
            .arg(text),
    );
    out.stdout
}

/// Runs `wanda eval` on the tiny setup (16-token windows, 4 of them, JSON) with the environment
/// variable `var` set to `value`; fails the test with stderr when it does not succeed.
fn tiny_eval_with(
    var: &str,
    value: impl AsRef<std::ffi::OsStr>,
    folder: &Path,
    text: &Path,
) -> std::process::Output {
    output_ok(
        Command::new(env!("CARGO_BIN_EXE_wanda"))
            .env(var, value)
            .args(["eval", "--device", "cpu", "--json", "--seqlen", "16"])
            .args(["--windows", "4", "--model"])
            .arg(folder)
            .arg("--text")
            .arg(text),
    )
}

#[test]
fn eval_json_reports_the_protocol_numbers() {
    let (_dir, folder, text_path) = tiny_setup(9, 100);
    let stdout = wanda_ok(
        &[
            "eval",
            "--device",
            "cpu",
            "--json",
            "--seqlen",
            "16",
            "--windows",
            "4",
        ],
        &folder,
        &text_path,
    );
    let json: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(json["windows"], 4);
    assert_eq!(json["seqlen"], 16);
    assert_eq!(json["tokens"], 64);
    assert_eq!(json["predicted_tokens"], 60);
    assert_eq!(json["text_tokens"], 100);
    assert_eq!(json["available_windows"], 6);

    // The same number from the library, computed independently of the CLI.
    let loaded = model::load::<B>(&ModelRef::Folder(folder), &Default::default()).unwrap();
    let ids = loaded.tokenizer.encode(&tiny_text(100)).unwrap();
    let report = perplexity(&loaded.model, &ids, 16, Some(4), 128, |_, _| {}).unwrap();
    let ppl = json["perplexity"].as_f64().unwrap();
    assert!(
        (ppl - report.perplexity).abs() < 1e-9 * report.perplexity,
        "{ppl} vs {}",
        report.perplexity
    );
    // A random model over 21 reachable ids is far from a perfect predictor.
    assert!(ppl > 2.0, "{ppl}");
}

#[test]
fn eval_of_a_missing_model_fails_with_exit_2_and_names_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args([
            "eval",
            "--device",
            "cpu",
            "--model",
            "nowhere/model.gguf",
            "--text",
            "x.txt",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("`nowhere/model.gguf`"), "{err}");
}

#[test]
fn dump_logits_writes_the_first_windows_logits() {
    let (dir, folder, text_path) = tiny_setup(4, 40);
    let dump = dir.path().join("logits.f32");
    let dump_arg = dump.display().to_string();
    wanda_ok(
        &[
            "eval",
            "--device",
            "cpu",
            "--json",
            "--seqlen",
            "16",
            "--dump-logits",
            &dump_arg,
        ],
        &folder,
        &text_path,
    );
    let bytes = std::fs::read(&dump).unwrap();
    let dumped: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let loaded = model::load::<B>(&ModelRef::Folder(folder), &Default::default()).unwrap();
    let ids = loaded.tokenizer.encode(&tiny_text(40)).unwrap();
    let tokens = wanda::eval::perplexity::window_tokens::<B>(&ids[..16], &Default::default());
    let want: Vec<f32> = loaded.model.forward(tokens).into_data().to_vec().unwrap();
    assert_eq!(dumped, want);
}

/// B10 names its shape, type and path (the blocked path on CPU backends), and rates every run.
#[test]
fn bench_attention_rates_the_blocked_path_on_the_cpu() {
    for (device, dtype) in [("cpu", "f32"), ("cpu-flex-f16", "f16")] {
        let out = output_ok(Command::new(env!("CARGO_BIN_EXE_wanda")).args([
            "bench",
            "attention",
            "--device",
            device,
            "--json",
            "--repeats",
            "3",
            "--batch",
            "1",
            "--heads",
            "2",
            "--seq",
            "40",
            "--head-dim",
            "16",
        ]));
        let figure: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            figure["name"],
            format!("B10 attention 1x2x40x16 {dtype} (blocked)")
        );
        assert_eq!(figure["unit"], "GFLOP/s");
        let runs = figure["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3);
        assert!(runs.iter().all(|r| r.as_f64().unwrap() > 0.0), "{figure}");
    }
    // A zero count is refused by its flag before any work, in every benchmark that takes one
    // (`bench forward --seqlen 0` panicked inside Burn; `bench gemm --m 0` rated 0 GFLOP/s).
    for (args, flag) in [
        (&["attention", "--seq", "0"][..], "--seq"),
        (
            &["forward", "--model", "unused", "--seqlen", "0"],
            "--seqlen",
        ),
        (&["gemm", "--m", "0"], "--m"),
        (&["prune-layer", "--tokens", "0"], "--tokens"),
        (&["sparse", "--k", "0"], "--k"),
        (
            &["decode", "--model", "unused", "--tokens", "0"],
            "--tokens",
        ),
    ] {
        assert_zero_refused(&[&["bench", "--device", "cpu"][..], args].concat(), flag);
    }
}

/// B11 names its shape, sparsity, bytes and the dense product of the same run, and rates
/// every run; a sparsity that is no fraction below 1 is refused by its flag.
#[test]
fn bench_sparse_rates_the_compressed_product_beside_the_dense_one() {
    let out = output_ok(Command::new(env!("CARGO_BIN_EXE_wanda")).args([
        "bench",
        "sparse",
        "--device",
        "cpu",
        "--json",
        "--repeats",
        "3",
        "--m",
        "2",
        "--k",
        "40",
        "--n",
        "24",
        "--sparsity",
        "0.5",
    ]));
    let figure: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let name = figure["name"].as_str().unwrap();
    assert!(
        name.starts_with("B11 sparse linear 2x40·40x24 at 0.5 (")
            && name.contains("dense f32's bytes")
            && name.contains("GFLOP/s by fused linear"),
        "{name}"
    );
    let runs = figure["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|r| r.as_f64().unwrap() > 0.0), "{figure}");
    let refused = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args(["bench", "sparse", "--device", "cpu", "--sparsity", "1"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("--sparsity 1") && err.contains("below 1"),
        "{err}"
    );
}

/// B12 decodes a tiny model with its cache and names the prompt's prefill rate, the bytes of
/// weights a token reads and the GB/s; a prompt and decode longer than the model's context are
/// refused with both flags named.
#[test]
fn bench_decode_rates_the_cached_steps_and_names_the_bytes_they_read() {
    let (_dir, folder, _) = tiny_setup(5, 10);
    let bench = |prompt: &str, tokens: &str, sparse: &str| {
        Command::new(env!("CARGO_BIN_EXE_wanda"))
            .args(["bench", "decode", "--device", "cpu", "--json"])
            .args(["--repeats", "3", "--sparse", sparse])
            .args(["--prompt", prompt, "--tokens", tokens, "--model"])
            .arg(&folder)
            .output()
            .unwrap()
    };
    // The figure's name, and stderr.
    let named = |out: std::process::Output| {
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        let figure: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let runs = figure["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3);
        assert!(runs.iter().all(|r| r.as_f64().unwrap() > 0.0), "{figure}");
        (figure["name"].as_str().unwrap().to_string(), stderr)
    };
    let (name, _) = named(bench("12", "6", "auto"));
    assert!(
        name.starts_with("B12 decode (6 tokens after a 12-token prompt at ")
            && name.contains("GB of weights a token")
            && name.ends_with("GB/s)"),
        "{name}"
    );
    // Dense random weights: `auto` holds none compressed; `on` holds every decoder linear,
    // decodes with them, and times the dense decoding in the same rounds.
    assert!(!name.contains("compressed"), "{name}");
    let (name, stderr) = named(bench("4", "3", "on"));
    let linears = 7 * 2;
    assert!(
        name.contains(&format!(
            "; {linears} of {linears} linears compressed (their sparsity 0.000;"
        )) && name.contains("; dense in the same rounds "),
        "{name}"
    );
    assert!(
        stderr.contains("wanda bench decode: 14 of 14 linears compressed"),
        "{stderr}"
    );
    let refused = bench("100000", "1", "auto");
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("--prompt (100000) plus --tokens (1) exceeds the model's context"),
        "{err}"
    );
}

#[test]
fn bench_perplexity_runs_fresh_processes_and_reports_medians() {
    let (_dir, folder, text_path) = tiny_setup(9, 100);
    let stdout = wanda_ok(
        &[
            "bench",
            "perplexity",
            "--device",
            "cpu",
            "--json",
            "--repeats",
            "3",
            "--seqlen",
            "16",
            "--windows",
            "4",
        ],
        &folder,
        &text_path,
    );
    let figures: Vec<serde_json::Value> = String::from_utf8(stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = figures
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["B2 perplexity", "B2 eval wall", "B2 eval", "B2 peak RSS"]
    );
    // Every run evaluates the same windows: the perplexity is the same in all three.
    let ppl = figures[0]["runs"].as_array().unwrap();
    assert_eq!(ppl.len(), 3);
    assert!(ppl.iter().all(|p| p == &ppl[0]), "{ppl:?}");
    let loaded = model::load::<B>(&ModelRef::Folder(folder), &Default::default()).unwrap();
    let ids = loaded.tokenizer.encode(&tiny_text(100)).unwrap();
    let report = perplexity(&loaded.model, &ids, 16, Some(4), 128, |_, _| {}).unwrap();
    let median = figures[0]["median"].as_f64().unwrap();
    assert!((median - report.perplexity).abs() < 1e-9 * report.perplexity);
    let rss = figures[3]["median"].as_f64().unwrap();
    assert!(rss > 0.001 && rss < 64.0, "peak RSS {rss} GiB");
}

/// `eval --windows 0` evaluated one window and `run --workers 0` ran one worker; both are now
/// refused by their flag before any work.
#[test]
fn zero_windows_and_zero_workers_are_refused_by_flag() {
    assert_zero_refused(
        &["eval", "--model", "m", "--text", "t", "--windows", "0"],
        "--windows",
    );
    assert_zero_refused(&["run", "p.yaml", "--workers", "0"], "--workers");
}

/// A long text's ids are kept between runs (`WANDA_TOKEN_CACHE`): the first run writes one
/// entry; a later run reads it (an entry forged with other ids changes the perplexity); an
/// altered entry is a miss, tokenised again, and the first run's perplexity comes back.
#[test]
fn a_long_texts_ids_are_kept_between_runs_and_a_damaged_entry_is_tokenised_again() {
    use wanda::data::token_cache::{key, TokenCache, MIN_CACHED_BYTES};
    let (dir, folder, text_path) = tiny_setup(9, 20_000);
    let text = std::fs::read_to_string(&text_path).unwrap();
    assert!(text.len() >= MIN_CACHED_BYTES, "{} bytes", text.len());
    let cache = dir.path().join("tokens");
    let run = || -> serde_json::Value {
        let out = tiny_eval_with("WANDA_TOKEN_CACHE", &cache, &folder, &text_path);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let entries = || -> Vec<PathBuf> {
        files_below(&cache)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|x| x == "ids"))
            .collect()
    };
    let first = run();
    let written = entries();
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(run()["perplexity"], first["perplexity"]);

    // An entry under the same key with every id moved to its neighbour in the vocabulary.
    let loaded = model::load::<B>(&ModelRef::Folder(folder.clone()), &Default::default()).unwrap();
    let ids = loaded.tokenizer.encode(&text).unwrap();
    let identity = loaded.tokenizer.identity().unwrap();
    let forged: Vec<u32> = ids.iter().map(|&id| (id + 1) % 21).collect();
    let at = TokenCache::at(written[0].parent().unwrap()).unwrap();
    at.put(&key(&identity, &text), &forged).unwrap();
    assert_eq!(entries(), written, "the forged entry replaced the first");
    let from_forged = run();
    assert_eq!(from_forged["text_tokens"], first["text_tokens"]);
    assert_ne!(
        from_forged["perplexity"], first["perplexity"],
        "the entry was read"
    );

    let mut bytes = std::fs::read(&written[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&written[0], &bytes).unwrap();
    assert_eq!(run()["perplexity"], first["perplexity"]);
    assert_eq!(run()["perplexity"], first["perplexity"]);
}

/// A token cache that cannot be made (`WANDA_TOKEN_CACHE` names a file) is a one-line warning
/// naming the variable, and the run tokenises as before, with the same perplexity.
#[test]
fn an_unusable_token_cache_is_a_warning_and_the_run_goes_on() {
    let (dir, folder, text_path) = tiny_setup(9, 20_000);
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"").unwrap();
    let run = |cache: &Path| tiny_eval_with("WANDA_TOKEN_CACHE", cache, &folder, &text_path);
    let blocked = run(&blocker);
    let stderr = String::from_utf8_lossy(&blocked.stderr);
    assert!(
        stderr.contains("warning: token cache") && stderr.contains("WANDA_TOKEN_CACHE"),
        "{stderr}"
    );
    let usable = run(&dir.path().join("tokens"));
    let ppl = |out: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["perplexity"].clone()
    };
    assert_eq!(ppl(&blocked), ppl(&usable));
    assert!(!String::from_utf8_lossy(&usable.stderr).contains("token cache"));
}

/// Where stderr is not a terminal (a log, a pipe), progress is written as lines: every step
/// with `WANDA_PROGRESS_SECONDS=0`, none with `off`.
#[test]
fn progress_is_written_as_lines_where_stderr_is_a_log() {
    let (_dir, folder, text_path) = tiny_setup(9, 100);
    let stderr_with = |seconds: &str| {
        let out = tiny_eval_with("WANDA_PROGRESS_SECONDS", seconds, &folder, &text_path);
        String::from_utf8(out.stderr).unwrap()
    };
    let every = stderr_with("0");
    let lines: Vec<&str> = every
        .lines()
        .filter(|l| l.starts_with("perplexity: "))
        .collect();
    assert!(!lines.is_empty(), "no progress lines in {every:?}");
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("perplexity: 4/4 windows, ") && last.ends_with(" elapsed"),
        "{last:?}"
    );
    assert!(!stderr_with("off").contains("perplexity: "));
}
