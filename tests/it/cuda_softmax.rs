//! The CUDA attention's softmax kernel (`src/model/kernels/causal_softmax.cu`), which no test
//! can launch without a GPU, run on the host by `scripts/gpu/softmax_on_host.cpp`: a warp as 32
//! lanes on one thread handing over at every shuffle and `__syncwarp`, in both hand-over orders,
//! against the causal softmax computed in double, writing f32, fp16 and bf16. Needs a C++17
//! compiler (`$CXX`, else `c++`).

use std::path::Path;
use std::process::Command;

#[test]
fn the_cuda_softmax_kernel_source_computes_the_causal_softmax_on_the_host() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("softmax_on_host");
    let built = Command::new(&compiler)
        .args(["-std=c++17", "-O1"])
        .arg(root.join("scripts/gpu/softmax_on_host.cpp"))
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
        "{compiler} failed on softmax_on_host.cpp: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && report.contains("all rows match"),
        "{report}"
    );
    // Both hand-over orders × 7 row lengths × 2 part sizes × 3 output types were checked.
    assert_eq!(
        report.matches("largest relative error").count(),
        2 * 7 * 2 * 3
    );
}
