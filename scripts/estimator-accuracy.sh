#!/usr/bin/env bash
# Regenerates results/estimator-accuracy.md: for nsamples {8, 32, 128} × seqlen {256, 512, 1024}
# × {wanda, sparsegpt} on SmolLM2-135M, the estimated peak memory of the run against the peak
# resident set measured by `wanda estimate --probe` (a fresh process per cell: load,
# tokenise, calibrate and prune the first 2 layers for real, evaluate one 512-token window).
# Usage: scripts/estimator-accuracy.sh [SHARED_DIR]   (default ../shared)
# $WANDA_BIN runs instead of a fresh release build when set (e.g. target/debug/wanda).
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${1:-../shared}
if [ -z "${WANDA_BIN:-}" ]; then
  cargo build --release --quiet
  WANDA_BIN=./target/release/wanda
fi
out=results/estimator-accuracy.md
tmp=$(mktemp)
{
  echo "# Estimator accuracy on SmolLM2-135M (CPU, f32)"
  echo
  echo "Estimated peak (\`wanda estimate\`) against the process's measured peak resident set"
  echo "(VmHWM) of \`wanda estimate --probe\`: load the Q4_1 GGUF, tokenise the calibration text,"
  echo "calibrate and prune the first 2 layers (every layer has the same shapes, so this is the"
  echo "prune stage's peak), tokenise the evaluation text and evaluate one window of 512. Batch 8."
  echo "Regenerate with \`scripts/estimator-accuracy.sh\` ($(date -u +%F), $(nproc) cores)."
  echo
  echo "| method | nsamples | seqlen | estimate GiB | measured GiB | error | peak stage |"
  echo "|---|---:|---:|---:|---:|---:|---|"
} > "$tmp"
for method in wanda sparsegpt; do
  for n in 8 32 128; do
    for s in 256 512 1024; do
      json=$("$WANDA_BIN" estimate --json --probe --method "$method" \
        --model "$shared/models/SmolLM2-135M-Instruct.Q4_1.gguf" --nsamples "$n" --seqlen "$s" \
        --calib-text "$shared/data/wikitext-2/wikitext2-v1-valid.txt" \
        --eval-text "$shared/data/wikitext-2/wikitext2-raw-test.txt" --eval-seqlen 512)
      python3 - "$method" "$n" "$s" "$json" >> "$tmp" <<'PY'
import json, sys
method, n, s, raw = sys.argv[1:]
d = json.loads(raw)
last = d["probe"]["stages"][-1]
est, meas = last["estimate_bytes"], last["measured_peak_rss_bytes"]
print(f"| {method} | {n} | {s} | {est / 2**30:.3f} | {meas / 2**30:.3f} | {100 * (est - meas) / meas:+.1f} % | {d['peak_stage']} |")
PY
    done
  done
done
mv "$tmp" "$out"
cat "$out"
