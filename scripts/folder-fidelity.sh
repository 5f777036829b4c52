#!/usr/bin/env bash
# Fidelity table of a Hugging Face folder: `wanda prune` against the reference's pruning
# (locuslab/wanda, done by scripts/torch-wanda-cell.py --hf-model; for OPT its `main_opt.py` /
# `lib/prune_opt.py`: layers under `model.decoder`, the six linears q/k/v/out_proj, fc1, fc2) on
# the folder $MODEL (default the tiny random OPT of tests/fixtures/models/tiny-opt; any
# tests/fixtures/models/tiny-<family> has the word vocabulary w1 … w95 the texts below use), with
# the same calibration draw (8 × 64 of a seeded word text, seed 0) and evaluation (16 × 64; $SEQLEN
# other than 64 for both, e.g. to stay within a LongRoPE model's pre-training context).
# Prints one markdown row per cell: both perplexities, their relative difference, and the largest
# share of weights whose keep/prune decision differs in any layer (scripts/compare-masks.py). A
# measuring tool, not a test: CI never runs it.
#
#   [MODEL=DIR] scripts/folder-fidelity.sh [CELL...]   # CELL as in scripts/fidelity.sh: wanda:0.7,
#                                                      # sparsegpt:2:4, wanda:0.5+owl, ria:0.5
#
# $WANDA_BIN runs a binary built earlier; otherwise the tree is built in release. The Python venv is
# $AB_VENV (default ~/.cache/wanda-ab-venv, with torch and transformers).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${AB_VENV:-$HOME/.cache/wanda-ab-venv}"
model="${MODEL:-tests/fixtures/models/tiny-opt}"
seqlen="${SEQLEN:-64}"
source scripts/ab-wanda.sh
# Seeded text over the fixture's word vocabulary (w1 … w95), with a little structure.
python3 - "$out" <<'PY'
import random, sys
r = random.Random(0)
def text(n):
    words, cur = [], 1
    for _ in range(n):
        cur = (cur * 7 + r.randint(0, 12)) % 95 + 1
        words.append(f"w{cur}")
    return " ".join(words)
open(f"{sys.argv[1]}/calib.txt", "w").write(text(6000))
open(f"{sys.argv[1]}/eval.txt", "w").write(text(3000))
PY
cells=("$@")
[ ${#cells[@]} -gt 0 ] || cells=(magnitude:0.5 magnitude:0.7 magnitude:2:4 wanda:0.5 wanda:0.7
  wanda:2:4 sparsegpt:0.5 sparsegpt:0.7 sparsegpt:2:4 ria:0.5 wanda:0.7+owl)
echo "| cell | wanda ppl | PyTorch ppl | relative | largest mask difference |"
echo "|---|---:|---:|---:|---:|"
for cell in "${cells[@]}"; do
  cell_flags "$cell"
  rm -rf "$out/ours"
  "$wanda" prune --model "$model" --method "$method" "${ours[@]}" --calib-text "$out/calib.txt" \
    --nsamples 8 --seqlen "$seqlen" --seed 0 --eval-text "$out/eval.txt" --eval-seqlen "$seqlen" --windows 16 \
    --device cpu --save "$out/ours" --dtype f32 --json > "$out/w.json" 2> "$out/w.err" \
    || { cat "$out/w.err" >&2; exit 2; }
  "$venv/bin/python" scripts/torch-wanda-cell.py --hf-model "$model" \
    --calib-text "$out/calib.txt" --eval-text "$out/eval.txt" --nsamples 8 --seqlen "$seqlen" \
    --seed 0 --method "$method" "${theirs[@]}" --windows 16 --threads 2 \
    --save-pruned "$out/theirs.safetensors" > "$out/t.json" 2> "$out/t.err" \
    || { cat "$out/t.err" >&2; exit 2; }
  "$venv/bin/python" scripts/compare-masks.py "$out/ours" "$out/theirs.safetensors" > "$out/masks.txt"
  python3 - "$out" "$cell" <<'PY'
import json, sys
out, cell = sys.argv[1], sys.argv[2]
w, t = json.load(open(f"{out}/w.json")), json.load(open(f"{out}/t.json"))
pw, pt = w["perplexity"]["perplexity"], t["perplexity"]
rows = open(f"{out}/masks.txt").read().splitlines()[1:]
differs = max(float(r.split()[1]) for r in rows)
print(f"| {cell} | {pw:.4f} | {pt:.4f} | {pw / pt - 1:+.2e} | {differs:.6f} |")
if w["calibration"] and w["calibration"]["offsets"] != t["calibration_offsets"]:
    sys.exit(f"{cell}: the calibration offsets differ")
PY
done
