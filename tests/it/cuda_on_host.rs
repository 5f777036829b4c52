//! CUDA kernels of our own, which no test can launch without a GPU, run on the host from their
//! source by the emulators in `scripts/gpu/` (threads as ucontexts on one thread, handing over
//! at every barrier or shuffle, in both hand-over orders). Needs a C++17 compiler (`$CXX`, else
//! `c++`).

use std::path::Path;
use std::process::Command;

/// Compiles `scripts/gpu/<emulator>.cpp` and runs it: its report (stdout), after asserting
/// that it exited with success.
fn run_emulator(emulator: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join(emulator);
    let built = Command::new(&compiler)
        .args(["-std=c++17", "-O1"])
        .arg(root.join(format!("scripts/gpu/{emulator}.cpp")))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run the C++ compiler `{compiler}` ({e}): install one (Debian: \
                 `apt-get install g++`) or name it in CXX"
            )
        });
    assert!(
        built.status.success(),
        "{compiler} failed on {emulator}.cpp: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let report = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{report}");
    report
}

/// The attention's softmax (`src/model/kernels/causal_softmax.cu`): a warp as 32 lanes, against
/// the causal softmax computed in double, writing f32, fp16 and bf16.
#[test]
fn the_cuda_softmax_kernel_source_computes_the_causal_softmax_on_the_host() {
    let report = run_emulator("softmax_on_host");
    assert!(report.contains("all rows match"), "{report}");
    // Both hand-over orders × 7 row lengths × 2 part sizes × 3 output types were checked.
    assert_eq!(
        report.matches("largest relative error").count(),
        2 * 7 * 2 * 3
    );
}

/// Pruning's selection kernels (`src/model/kernels/column_select.cu`), against the host's rules
/// for f32, fp16 and bf16 weights: Wanda's per-output rule as blocks of 256 threads (a stable
/// sort of each column's scores and its first `k`), N:M (the same per group of `m` rows),
/// magnitude's per-matrix threshold as a chain of launches over a grid of several blocks.
#[test]
fn the_cuda_selection_kernel_source_selects_the_hosts_zeros_on_the_host() {
    let report = run_emulator("select_on_host");
    // Over both hand-over orders × 4 row counts × 3 column counts: per column, 3 types × 5
    // values of k and 2 launches with a score that is not finite; N:M, 1:2, 2:4, 3:4 and 4:8 in
    // 3 types where the rows divide into groups, and one launch with a score that is not
    // finite where they divide by 4; per matrix, 3 types × 3 values of k × 2 sets of norms,
    // and 2 launches with a score that is not finite.
    assert!(
        report.contains("408 per column, 156 N:M and 480 per matrix launches: all masks match"),
        "{report}"
    );
}
