#!/usr/bin/env bash
# The bundled demo: fetch the demo model and texts, build wanda, and run the demo pipeline
# (SmolLM2-135M pruned to 50 % with Wanda, perplexity on WikiText-2), then let the dense model talk.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-demo.sh
cargo build --release --quiet
wanda="${CARGO_TARGET_DIR:-target}/release/wanda"
"$wanda" run pipelines/smollm2-135m.yaml
"$wanda" generate --model demo/SmolLM2-135M-Instruct.Q4_1.gguf \
  --prompt "The history of the Roman Empire" --max-new-tokens 40
