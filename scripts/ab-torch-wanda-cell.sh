#!/usr/bin/env bash
# A/B benchmark of one whole Wanda cell (B3: load the GGUF, calibrate + prune wanda 50 % with
# 32 × 512 calibration windows of WikiText-2 valid at seed 0, evaluate 64 windows × 512 of
# WikiText-2 test) against the same cell in PyTorch done the reference code's way
# (scripts/torch-wanda-cell.py), interleaved round by round. Prints each figure's median (min–max)
# and the ratio, the perplexities and whether the calibration draws agree. A benchmark tool, not a
# test: CI never runs it.
#
#   scripts/ab-torch-wanda-cell.sh [ROUNDS]      # default: 3 rounds
#
# The Python venv is the one scripts/ab-transformers.sh makes ($AB_VENV, default
# ~/.cache/wanda-ab-venv). wanda runs with $WANDA_DEVICE (default cpu); PyTorch with all cores.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
source scripts/ab-common.sh
now() { date +%s.%N; }

for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds" >&2
  t0=$(now)
  "$wanda" prune --model "$model" --method wanda --sparsity 0.5 --calib-text "$calib" --nsamples 32 \
    --seqlen 512 --seed 0 --eval-text "$text" --eval-seqlen 512 --windows 64 --device "$device" \
    --json > "$out/w-$r.json"
  echo "$(now) - $t0" | bc > "$out/w-$r.wall"
  t0=$(now)
  "$venv/bin/python" scripts/torch-wanda-cell.py --gguf "$model" "${hf_args[@]}" --calib-text "$calib" \
    --eval-text "$text" --nsamples 32 --seqlen 512 --seed 0 --sparsity 0.5 --windows 64 \
    > "$out/t-$r.json" 2> "$out/t-$r.err" || { cat "$out/t-$r.err" >&2; exit 2; }
  echo "$(now) - $t0" | bc > "$out/t-$r.wall"
done

python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = lambda side: [(json.load(open(f"{out}/{side}-{r}.json")), float(open(f"{out}/{side}-{r}.wall").read()))
                     for r in range(1, rounds + 1)]
w, t = runs("w"), runs("t")
rows = [
    ("whole cell wall s (process)", [x[1] for x in w], [x[1] for x in t]),
    ("load s", [x[0]["load_seconds"] for x in w], [x[0]["load_seconds"] for x in t]),
    # PyTorch's prune time includes tokenising the calibration text; wanda's is its own stage.
    ("calibrate + prune s", [x[0]["prune_seconds"] + (x[0].get("calibrate_seconds") or 0) for x in w],
     [x[0]["prune_seconds"] for x in t]),
    ("eval s", [x[0]["eval_seconds"] for x in w], [x[0]["eval_seconds"] for x in t]),
    ("peak RSS GiB", [x[0]["peak_rss_bytes"] / 2**30 for x in w], [x[0]["peak_rss_bytes"] / 2**30 for x in t]),
]
print(f"B3 wanda 50 %: wanda on {w[0][0]['device']}; torch {t[0][0]['torch']}, {t[0][0]['threads']} threads; {rounds} rounds")
print(f"{'figure':30} {'wanda median (min–max)':>26} {'PyTorch median (min–max)':>28} {'wanda/PyTorch':>14}")
for name, a, b in rows:
    (am, al, ah), (bm, bl, bh) = [(statistics.median(v), min(v), max(v)) for v in (a, b)]
    print(f"{name:30} {am:10.2f} ({al:.2f}–{ah:.2f}) {bm:12.2f} ({bl:.2f}–{bh:.2f}) {am / bm:13.3f}x")
pw, pt = w[0][0]["perplexity"]["perplexity"], t[0][0]["perplexity"]
print(f"perplexity: wanda {pw:.6f}, PyTorch {pt:.6f} (relative {abs(pw / pt - 1):.2e}); "
      f"sparsity wanda {w[0][0]['sparsity']['total']:.6f}, PyTorch {t[0][0]['sparsity']:.6f}")
same = w[0][0]["calibration"]["offsets"] == t[0][0]["calibration_offsets"]
print(f"calibration offsets: {'identical' if same else 'DIFFERENT'}")
PY
