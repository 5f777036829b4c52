#!/usr/bin/env bash
# Fidelity table of expert pruning: each cell (fixture × method × fraction) run by `wanda run`
# and by scripts/reap-reference.py (REAP's metric code transcribed, in PyTorch) on the same
# calibration windows (8 × 64 tokens, seed 0, of tests/fixtures/data/fixture-words/calib.txt:
# a real text in the fixtures' vocabulary) and evaluation (windows of 64 of eval.txt). Prints
# one markdown row per cell: the largest relative difference of each saliency, whether every
# layer kept the same experts, both perplexities, and transformers' reload of wanda's saved
# folder (its expert count and max |Δ logits| against the reference's pruned model). A
# measuring tool, not a test: CI never runs it.
#
#   scripts/reap-fidelity.sh [FIXTURE:METHOD:FRACTION ...]
#
# Needs the venv of scripts/make-family-fixture.py (torch, transformers 5, tokenizers) and a
# wanda binary (scripts/experts-common.sh: $VENV, $WANDA).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/experts-common.sh
cells=("$@")
if [ ${#cells[@]} -eq 0 ]; then
  for f in mixtral qwen3_moe olmoe deepseek_v2-16e deepseek_v3-16e glm4_moe-16e; do
    for m in reap frequency ean weighted_frequency; do
      for x in 0.25 0.5; do cells+=("$f:$m:$x"); done
    done
  done
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| fixture | method | experts | saliency max rel. diff (reap, frequency, ean, weighted_frequency) | kept equal | smallest gap | wanda ppl | PyTorch ppl | relative | reload count | reload max abs logit diff |"
echo "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|"
for cell in "${cells[@]}"; do
  IFS=: read -r fixture method fraction <<< "$cell"
  model=$root/tests/fixtures/models/tiny-$fixture
  dir=$out/$fixture-$method-$fraction
  if ! run_expert_cell "$dir" "$fixture" "$method" "$fraction"; then
    echo "| $fixture | $method | $fraction | wanda refused: $(grep -m1 -i error "$dir/wanda.log") |"
    continue
  fi
  "$venv/bin/python" scripts/reap-reference.py --model "$model" --calib-text "$words/calib.txt" \
    --nsamples 8 --seqlen 64 --seed 0 --eval-text "$words/eval.txt" --eval-seqlen 64 \
    --method "$method" --experts "$fraction" --wanda-experts "$saved/wanda_experts.json" \
    --wanda-run "$record" --wanda-folder "$saved" --json "$dir/ref.json" > "$dir/ref.log" 2>&1
  "$venv/bin/python" - "$dir/ref.json" "$fixture" "$method" "$fraction" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = r["summary"]
diff = s["max_rel_diff"]
diffs = ", ".join(f"{diff.get(k, float('nan')):.1e}" for k in ("reap", "frequency", "ean", "weighted_frequency"))
kept = "yes" if s["kept_equal"] == s["layers_compared"] and s["layers_missing"] == 0 else f"{s['kept_equal']}/{s['layers_compared']}"
f = r["wanda_folder"]
count = next(iter(f["transformers_reads"].values()))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {diffs} | {kept} | {s['min_gap']:.2g} | "
      f"{r['wanda_perplexity']:.4f} | {s['pruned_perplexity']:.4f} | {s['perplexity_rel_diff']:.1e} | "
      f"{count} | {s['wanda_folder_max_abs_logit_diff']:.1e} |")
PY
done
