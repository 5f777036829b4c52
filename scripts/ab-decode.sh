#!/usr/bin/env bash
# A/B benchmark of decoding at batch 1 with a KV cache: `wanda bench decode` (B12) against
# PyTorch + transformers (scripts/torch-decode.py) on the same model, prompt and ids, interleaved
# round by round so both see the same machine state. A benchmark tool, not a test: CI never runs it.
#
#   scripts/ab-decode.sh [ROUNDS] [PROMPT] [TOKENS]      # defaults: 3 rounds, 128-token prompt, 64 tokens
#
# Set-up as scripts/ab-common.sh says ($AB_GGUF for another model, $WANDA_BIN for a built binary);
# $AB_FOLDER instead runs a Hugging Face folder on both sides (e.g. one `wanda synth` wrote).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
prompt="${2:-128}"
tokens="${3:-64}"
source scripts/ab-common.sh
if [ -n "${AB_FOLDER:-}" ]; then
  model="$AB_FOLDER"
  torch_model=(--folder "$AB_FOLDER")
else
  torch_model=(--gguf "$model" "${hf_args[@]}")
fi

for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds" >&2
  "$wanda" bench decode --model "$model" --prompt "$prompt" --tokens "$tokens" --repeats 3 \
    --device "$device" --json > "$out/w-$r.json"
  "$venv/bin/python" scripts/torch-decode.py "${torch_model[@]}" --prompt "$prompt" \
    --tokens "$tokens" --repeats 3 > "$out/t-$r.json" 2> "$out/t-$r.err" \
    || { cat "$out/t-$r.err" >&2; exit 2; }
done

"$venv/bin/python" - "$out" "$rounds" <<'PY'
import json, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
w = [json.loads(open(f"{out}/w-{r}.json").read().splitlines()[-1]) for r in range(1, rounds + 1)]
t = [json.load(open(f"{out}/t-{r}.json")) for r in range(1, rounds + 1)]
prefill = [float(re.search(r"prompt at ([0-9.]+) tokens/s", j["name"]).group(1)) for j in w]
gb = float(re.search(r"([0-9.]+) GB of weights", w[0]["name"]).group(1))
rows = [("decode tokens/s", [x for j in w for x in j["runs"]],
         [x for j in t for x in j["decode_tokens_per_second"]]),
        ("prefill tokens/s (round medians)", prefill,
         [statistics.median(j["prefill_tokens_per_second"]) for j in t])]
print(f"wanda: {w[0]['device']}; torch {t[0]['torch']}, transformers {t[0]['transformers']}, "
      f"{t[0]['threads']} threads; {rounds} rounds; {gb} GB of weights a token")
print(f"{'figure':34} {'wanda median (min–max)':>26} {'PyTorch median (min–max)':>26} {'wanda/PyTorch':>14}")
for name, a, b in rows:
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{name:34} {ma:10.1f} ({min(a):.1f}–{max(a):.1f}) {mb:12.1f} ({min(b):.1f}–{max(b):.1f}) {ma / mb:13.2f}x")
d = statistics.median(rows[0][1])
print(f"wanda reads {gb * d:.1f} GB/s of weights at its median decode rate")
PY
