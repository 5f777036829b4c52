#!/bin/bash
# Fills gpu-carry/ (ignored by git) at the repository root with what scripts/gpu/run.sh needs on
# a GPU machine that has PyTorch but no network and no Rust: a stripped CUDA build of wanda, the
# SmolLM2 config and tokenizer, the two WikiText-2 texts; with AUTOTUNE=1 also a build with
# `--features cuda-autotune` (target/cuda-autotune; copy target/cuda there first to build only
# what the feature changes); with BASE=FILE also that wanda binary (an earlier build, kept by
# copying target/cuda/release/wanda aside) as the baseline `wanda-base`. Binaries travel
# gzipped, under the device tool's 64 MiB limit together with the tracked tree. Then, with the
# device tool:
#   run(command="bash scripts/gpu/run.sh gpu-carry", carry=["gpu-carry"], timeout_s=590)
set -euo pipefail
cd "$(dirname "$0")/../.."
shared=${WANDA_SHARED:-../shared}
grep -qx '/gpu-carry/' .git/info/exclude 2>/dev/null || echo '/gpu-carry/' >> .git/info/exclude
target=${CARGO_TARGET_DIR:-target}/cuda
CARGO_TARGET_DIR=$target cargo build --release --features cuda
rm -rf gpu-carry && mkdir -p gpu-carry/hf
strip -o gpu-carry/wanda "$target/release/wanda" && gzip -9 gpu-carry/wanda
if [[ ${AUTOTUNE:-0} == 1 ]]; then
  CARGO_TARGET_DIR=$target-autotune cargo build --release --features cuda-autotune
  strip -o gpu-carry/wanda-autotune "$target-autotune/release/wanda" && gzip -9 gpu-carry/wanda-autotune
fi
if [[ -n ${BASE:-} ]]; then
  strip -o gpu-carry/wanda-base "$BASE" && gzip -9 gpu-carry/wanda-base
fi
cp "$shared"/models/smollm2-135m-hf/{config.json,tokenizer.json,tokenizer_config.json,special_tokens_map.json} gpu-carry/hf/
cp "$shared"/data/wikitext-2/{wikitext2-raw-test.txt,wikitext2-v1-valid.txt} gpu-carry/
du -sh gpu-carry
