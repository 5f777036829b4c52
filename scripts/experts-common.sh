# Shared by scripts/reap-fidelity.sh and scripts/experts-reload.sh (sourced from the repository
# root): the PyTorch venv ($VENV, default ~/.cache/wanda-ab-venv), the wanda binary ($WANDA,
# default the newer of target/release/wanda and target/debug/wanda), the fixture-words texts,
# and `run_expert_cell DIR FIXTURE METHOD AMOUNT`, which removes experts from a tiny fixture by
# `wanda run` (calibration 8 × 64 tokens of calib.txt, seed 0; perplexity on windows of 64 of
# eval.txt; the model saved in f32) and sets $record to the cell's run.json and $saved to its
# saved folder; it returns non-zero, with wanda's log in DIR/wanda.log, where wanda refused.
root=$PWD
venv=${VENV:-$HOME/.cache/wanda-ab-venv}
wanda=${WANDA:-}
[ -n "$wanda" ] || wanda=$(ls -t target/release/wanda target/debug/wanda 2>/dev/null | head -1)
words=$root/tests/fixtures/data/fixture-words

run_expert_cell() {
  local dir=$1 fixture=$2 method=$3 amount=$4
  mkdir -p "$dir"
  cat > "$dir/pipeline.yaml" <<YAML
name: experts
seed: 0
device: cpu
model: { path: $root/tests/fixtures/models/tiny-$fixture }
calibration: { text: $words/calib.txt, nsamples: 8, seqlen: 64 }
evaluation: { text: $words/eval.txt, seqlen: 64 }
stages:
  load: {}
  calibrate: {}
  prune: { method: $method, experts: $amount }
  eval: { perplexity: true }
  save: { model: true, dtype: f32 }
YAML
  "$wanda" run "$dir/pipeline.yaml" --results "$dir/results" > "$dir/wanda.log" 2>&1 || return 1
  record=$(ls "$dir"/results/experts/*/run.json)
  saved=$(dirname "$record")/model
}
