#!/usr/bin/env bash
# Does a folder saved after expert pruning load in transformers as it is, as a model of fewer
# experts that scores what wanda scored? For each tiny mixture of experts: `wanda run` removes
# experts by REAP (one a layer; one a group for DeepSeek's grouped routers), evaluates and saves
# in f32; then scripts/transformers-ppl.py loads the saved folder with
# AutoModelForCausalLM.from_pretrained and scores the same windows. Prints one markdown row
# per family: the expert count transformers reads, both perplexities and their relative
# difference. A measuring tool, not a test: CI never runs it.
#
#   scripts/experts-reload.sh [FAMILY...]
#
# Needs the venv of scripts/make-family-fixture.py and a wanda binary
# (scripts/experts-common.sh: $VENV, $WANDA).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/experts-common.sh
families=("$@")
[ ${#families[@]} -gt 0 ] || families=(mixtral qwen3_moe olmoe qwen2_moe deepseek_v2-16e \
  deepseek_v3-16e glm4_moe-16e gpt_oss gpt_oss-mxfp4 granitemoe granitemoeshared granitemoehybrid-moe llama4 \
  qwen3-vl-moe)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| family | experts before → after | config.json counts | wanda ppl | transformers ppl | relative |"
echo "|---|---|---:|---:|---:|---:|"
for family in "${families[@]}"; do
  case $family in *-16e) remove=4 ;; *) remove=1 ;; esac
  dir=$out/$family
  if ! run_expert_cell "$dir" "$family" reap "$remove"; then
    echo "| $family | wanda: $(grep -m1 -i error "$dir/wanda.log") |"
    continue
  fi
  if ! "$venv/bin/python" scripts/transformers-ppl.py --folder "$saved" --tokenizer-json \
      --text "$words/eval.txt" --seqlen 64 > "$dir/ref.json" 2> "$dir/ref.log"; then
    echo "| $family | transformers: $(tail -1 "$dir/ref.log") |"
    continue
  fi
  "$venv/bin/python" - "$record" "$dir/ref.json" "$saved/config.json" "$family" <<'PY'
import json, sys
record, ref, config = (json.load(open(p)) for p in sys.argv[1:4])
e = record["experts"]
ours, theirs = record["metrics"]["perplexity"], ref["perplexity"]
text = config.get("text_config", config)
counts = {k: text[k] for k in ("num_local_experts", "num_experts", "n_routed_experts") if k in text}
print(f"| {sys.argv[4]} | {e['experts_before']} → {e['experts_after']} | {counts} | {ours:.4f} | "
      f"{theirs:.4f} | {abs(ours - theirs) / theirs:.1e} |")
PY
done
