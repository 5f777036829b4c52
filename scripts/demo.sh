#!/usr/bin/env bash
# The bundled demo: fetch the demo model and texts, build wanda, and run the demo pipeline
# (SmolLM2-135M pruned to 50 % with Wanda, perplexity on WikiText-2), then let the dense model talk.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-demo.sh
cargo build --release --quiet
wanda="${CARGO_TARGET_DIR:-target}/release/wanda"
shared="${WANDA_SHARED:-../shared}"
sets=()
if [ ! -d "$shared/models" ] || [ ! -d "$shared/data" ]; then
  # Without ../shared the pipeline's data paths point at the fetched copies (relative to pipelines/).
  sets=(--set model.gguf=../demo/SmolLM2-135M-Instruct.Q4_1.gguf
        --set calibration.text=../demo/wikitext2-v1-valid.txt
        --set evaluation.text=../demo/wikitext2-raw-test.txt)
fi
"$wanda" run pipelines/smollm2-135m.yaml "${sets[@]}"
"$wanda" generate --model demo/SmolLM2-135M-Instruct.Q4_1.gguf \
  --prompt "The history of the Roman Empire" --max-new-tokens 40
