#!/usr/bin/env bash
# How far f32 itself lies from the exact expert saliencies: each cell (fixture × method ×
# fraction) run by `wanda run` and by scripts/reap-reference.py twice on the same calibration
# windows as scripts/reap-fidelity.sh, once as REAP computes (f32) and once with the model and
# the metric code in f64. Prints one markdown row per cell: the largest relative difference of
# any saliency (of every method, every layer) of wanda against the f64 reference, of the f32
# reference against the f64 one, and of wanda against the f32 reference. A measuring tool, not a
# test: CI never runs it.
#
#   scripts/reap-precision.sh FIXTURE:METHOD:FRACTION ...   # e.g. deepseek_v3-16e:reap:0.25
#
# Needs the venv and wanda binary of scripts/experts-common.sh ($VENV, $WANDA).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/experts-common.sh
[ $# -gt 0 ] || { echo "usage: $0 FIXTURE:METHOD:FRACTION ..." >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| fixture | method | experts | wanda vs f64 | PyTorch f32 vs f64 | wanda vs PyTorch f32 |"
echo "|---|---|---:|---:|---:|---:|"
for cell in "$@"; do
  IFS=: read -r fixture method fraction <<< "$cell"
  dir=$out/$fixture-$method-$fraction
  run_expert_cell "$dir" "$fixture" "$method" "$fraction" || { echo "wanda refused $cell" >&2; exit 1; }
  for dtype in float32 float64; do
    "$venv/bin/python" scripts/reap-reference.py --model "$root/tests/fixtures/models/tiny-$fixture" \
      --calib-text "$words/calib.txt" --nsamples 8 --seqlen 64 --seed 0 --eval-text "$words/eval.txt" \
      --eval-seqlen 64 --method "$method" --experts "$fraction" --dtype "$dtype" \
      --json "$dir/$dtype.json" > "$dir/$dtype.log" 2>&1 || { cat "$dir/$dtype.log" >&2; exit 1; }
  done
  "$venv/bin/python" - "$saved/wanda_experts.json" "$dir/float32.json" "$dir/float64.json" "$cell" <<'PY'
import json, sys
wanda = {l["layer"]: l["saliency"] for l in json.load(open(sys.argv[1]))["layers"]}
f32, f64 = ({r["layer"]: r["saliency"] for r in json.load(open(p))["layers"]} for p in sys.argv[2:4])
def worst(a, b):
    return max(abs(x - y) / max(abs(y), 1e-30)
               for layer in b for m in b[layer] if m in a.get(layer, {})
               for x, y in zip(a[layer][m], b[layer][m]))
fixture, method, fraction = sys.argv[4].split(":")
print(f"| {fixture} | {method} | {fraction} | {worst(wanda, f64):.1e} | {worst(f32, f64):.1e} | "
      f"{worst(wanda, f32):.1e} |")
PY
done
