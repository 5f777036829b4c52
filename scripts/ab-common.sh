# Set-up shared by the A/B scripts (sourced, from the repository root): the model ($AB_GGUF, else
# the shared SmolLM2) and texts and a check that they exist, the Python venv outside the
# repository ($AB_VENV, default ~/.cache/wanda-ab-venv, created on first use with `pip install
# torch transformers gguf accelerate`), and scripts/ab-wanda.sh (the wanda binary, a scratch
# folder, cell flags).
venv="${AB_VENV:-$HOME/.cache/wanda-ab-venv}"
device="${WANDA_DEVICE:-cpu}"
shared="${WANDA_SHARED:-../shared}"
calib="$shared/data/wikitext-2/wikitext2-v1-valid.txt"
text="$shared/data/wikitext-2/wikitext2-raw-test.txt"
# The model: SmolLM2 with transformers' config and tokenizer from $hf_dir (`hf_args`), or
# $AB_GGUF, another GGUF file read with its own config and tokenizer on both sides (e.g.
# demo/gemma-3-270m-q4_k_m.gguf from scripts/fetch-gemma3.sh).
if [ -n "${AB_GGUF:-}" ]; then
  model="$AB_GGUF"
  hf_args=()
  needed=("$model")
else
  model="$shared/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  hf_dir="$shared/models/smollm2-135m-hf"
  hf_args=(--hf-dir "$hf_dir")
  needed=("$model" "$hf_dir/config.json")
fi
for f in "${needed[@]}" "$calib" "$text"; do
  [ -e "$f" ] || { echo "error: \`$f\` is missing; run scripts/fetch-demo.sh or set WANDA_SHARED" >&2; exit 2; }
done
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet torch transformers gguf accelerate
fi
source scripts/ab-wanda.sh
