#!/usr/bin/env bash
# A/B benchmark of a model with experts at a real shape (issue 77's item 5): a random
# granite-3.1-1b-a400m folder of 8 layers (scripts/make-random-shape.py granite-1b-a400m-8l: 32
# experts 512 wide, 8 a token). Each round, interleaved: the dense model's perplexity on 8
# windows × 256 of WikiText-2 test by `wanda eval` and by transformers' own modules
# (scripts/transformers-ppl.py --folder, what users run), then one Wanda 50 % cell (calibrate +
# prune 8 × 256 windows of WikiText-2 valid at seed 0, evaluate the same 8 windows) by wanda and
# by PyTorch done the reference code's way (scripts/torch-wanda-cell.py). With
# $WANDA_BEFORE, a second wanda binary (an older build) runs the same cell in each round, so a
# change is measured against both in one run. Prints each figure's median (min–max), the ratios
# and the perplexities. A benchmark tool, not a test: CI never runs it.
#
#   scripts/ab-experts-speed.sh [ROUNDS]      # default: 3 rounds
#
# The folder is made once under $AB_SHAPES (default ~/.cache/wanda/shapes).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
source scripts/ab-common.sh
now() { date +%s.%N; }

shapes="${AB_SHAPES:-$HOME/.cache/wanda/shapes}"
folder="$shapes/granite-1b-a400m-8l"
if [ ! -e "$folder/config.json" ]; then
  mkdir -p "$shapes"
  "$venv/bin/python" scripts/make-random-shape.py granite-1b-a400m-8l "$folder" "$hf_dir/tokenizer.json"
fi
cell=(--calib-text "$calib" --nsamples 8 --seqlen 256 --seed 0 --sparsity 0.5)
sides=(w)
[ -n "${WANDA_BEFORE:-}" ] && sides+=(b)

for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds" >&2
  for side in "${sides[@]}"; do
    bin="$wanda"
    [ "$side" = b ] && bin="$WANDA_BEFORE"
    "$bin" eval --model "$folder" --text "$text" --seqlen 256 --windows 8 --device "$device" \
      --json > "$out/$side-eval-$r.json"
    t0=$(now)
    "$bin" prune --model "$folder" --method wanda "${cell[@]}" --eval-text "$text" --eval-seqlen 256 \
      --windows 8 --device "$device" --json > "$out/$side-$r.json"
    echo "$(now) - $t0" | bc > "$out/$side-$r.wall"
  done
  "$venv/bin/python" scripts/transformers-ppl.py --folder "$folder" --tokenizer-json --text "$text" \
    --seqlen 256 --windows 8 --threads "$(nproc)" > "$out/t-eval-$r.json"
  t0=$(now)
  "$venv/bin/python" scripts/torch-wanda-cell.py --hf-model "$folder" "${cell[@]}" --eval-text "$text" \
    --windows 8 > "$out/t-$r.json" 2> "$out/t-$r.err" || { cat "$out/t-$r.err" >&2; exit 2; }
  echo "$(now) - $t0" | bc > "$out/t-$r.wall"
done

python3 - "$out" "$rounds" "${sides[*]}" <<'PY'
import json, os, statistics, sys
out, rounds, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def runs(side):
    return [(json.load(open(f"{out}/{side}-{r}.json")), float(open(f"{out}/{side}-{r}.wall").read()))
            for r in range(1, rounds + 1)]
def dense_eval(side):
    return [json.load(open(f"{out}/{side}-eval-{r}.json")) for r in range(1, rounds + 1)]
def wanda_figures(w, side):
    return {
        "dense eval s": [x["eval_seconds"] for x in dense_eval(side)],
        "whole cell wall s (process)": [x[1] for x in w],
        "calibrate + prune s": [x[0]["prune_seconds"] + (x[0].get("calibrate_seconds") or 0) for x in w],
        "eval s": [x[0]["eval_seconds"] for x in w],
        "peak RSS GiB": [x[0]["peak_rss_bytes"] / 2**30 for x in w],
    }
t = runs("t")
torch = {
    "dense eval s": [x["eval_seconds"] for x in dense_eval("t")],
    "whole cell wall s (process)": [x[1] for x in t],
    # PyTorch's prune time includes tokenising the calibration text; wanda's is its own stage.
    "calibrate + prune s": [x[0]["prune_seconds"] for x in t],
    "eval s": [x[0]["eval_seconds"] for x in t],
    "peak RSS GiB": [x[0]["peak_rss_bytes"] / 2**30 for x in t],
}
names = {"w": "wanda", "b": "wanda before"}
figures = {side: (runs(side), wanda_figures(runs(side), side)) for side in sides}
print(f"granite-1b-a400m-8l, Wanda 50 %: torch {t[0][0]['torch']}, {t[0][0]['threads']} threads; {rounds} rounds")
med = lambda v: f"{statistics.median(v):8.2f} ({min(v):.2f}–{max(v):.2f})"
for name in torch:
    cols = [f"{names[s]} {med(figures[s][1][name])} = {statistics.median(figures[s][1][name]) / statistics.median(torch[name]):.3f}x"
            for s in sides]
    print(f"{name:28} PyTorch {med(torch[name])} | " + " | ".join(cols))
pt = dense_eval("t")[0]["perplexity"]
for s in sides:
    pw = dense_eval(s)[0]["perplexity"]
    print(f"dense perplexity: {names[s]} {pw:.6f}, transformers {pt:.6f} (relative {abs(pw / pt - 1):.2e})")
pt = t[0][0]["perplexity"]
for s in sides:
    pw = figures[s][0][0][0]["perplexity"]["perplexity"]
    print(f"perplexity: {names[s]} {pw:.6f}, PyTorch {pt:.6f} (relative {abs(pw / pt - 1):.2e})")
PY
