#!/usr/bin/env bash
# The bundled demo: fetch the demo model and texts, build wanda, and measure the dense
# SmolLM2-135M perplexity on WikiText-2 (first 8 windows of 512 tokens), then let it talk.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-demo.sh
cargo build --release --quiet
wanda=target/release/wanda
[ -n "${CARGO_TARGET_DIR:-}" ] && wanda="$CARGO_TARGET_DIR/release/wanda"
"$wanda" eval --model demo/SmolLM2-135M-Instruct.Q4_1.gguf --text demo/wikitext2-raw-test.txt \
  --seqlen 512 --windows 8
"$wanda" generate --model demo/SmolLM2-135M-Instruct.Q4_1.gguf \
  --prompt "The history of the Roman Empire" --max-new-tokens 40
