#!/usr/bin/env bash
# A/B benchmark of wanda against PyTorch + transformers on this CPU (B1 forward tokens/s, B2 dense
# perplexity wall time and peak RSS, max logit difference on one window), interleaved round by
# round so both see the same machine state. A benchmark tool, not a test: CI never runs it.
#
#   scripts/ab-transformers.sh [ROUNDS] [WINDOWS]      # defaults: 3 rounds, 64 windows × 512
#
# The Python side lives in a venv outside the repository ($AB_VENV, default ~/.cache/wanda-ab-venv),
# created on first use with `pip install torch transformers gguf accelerate`. wanda runs with $WANDA_DEVICE
# (default cpu); PyTorch with all cores (torch.get_num_threads()).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
windows="${2:-64}"
source scripts/ab-common.sh

for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds" >&2
  "$wanda" bench forward --model "$model" --repeats 3 --device "$device" --json > "$out/w-b1-$r.json"
  "$wanda" eval --model "$model" --text "$text" --seqlen 512 --windows "$windows" --device "$device" \
    --json $([ "$r" = 1 ] && echo --dump-logits "$out/w-logits.f32") > "$out/w-b2-$r.json"
  "$venv/bin/python" scripts/transformers-ppl.py --gguf "$model" "${hf_args[@]}" --text "$text" \
    --seqlen 512 --windows "$windows" --bench-forward 3 \
    $([ "$r" = 1 ] && echo --dump-logits "$out/t-logits.f32") > "$out/t-$r.json" 2> "$out/t-$r.err" \
    || { cat "$out/t-$r.err" >&2; exit 2; }
done

"$venv/bin/python" - "$out" "$rounds" <<'PY'
import json, statistics, sys
import numpy as np
out, rounds = sys.argv[1], int(sys.argv[2])
load = lambda name: [json.load(open(f"{out}/{name}-{r}.json")) for r in range(1, rounds + 1)]
w1, w2, t = load("w-b1"), load("w-b2"), load("t")
def stats(values):
    return statistics.median(values), min(values), max(values)
rows = [
    ("B1 forward tokens/s (1 × 512)", [x for j in w1 for x in j["runs"]],
     [x for j in t for x in j["forward_tokens_per_second"]], True),
    ("B2 eval wall s", [j["eval_seconds"] for j in w2], [j["eval_seconds"] for j in t], False),
    ("B2 eval tokens/s", [j["tokens_per_second"] for j in w2], [j["tokens_per_second"] for j in t], True),
    ("load s", [j["load_seconds"] for j in w2], [j["load_seconds"] for j in t], False),
    ("peak RSS GiB", [j["peak_rss_bytes"] / 2**30 for j in w2], [j["peak_rss_bytes"] / 2**30 for j in t], False),
]
print(f"wanda device: {w2[0]['device']}; torch {t[0]['torch']}, {t[0]['threads']} threads; {rounds} rounds, "
      f"{w2[0]['windows']} windows × {w2[0]['seqlen']}")
print(f"{'figure':32} {'wanda median (min–max)':>28} {'transformers median (min–max)':>32} {'wanda/transformers':>19}")
for name, w, tv, higher in rows:
    (wm, wl, wh), (tm, tl, th) = stats(w), stats(tv)
    print(f"{name:32} {wm:12.2f} ({wl:.2f}–{wh:.2f}) {tm:15.2f} ({tl:.2f}–{th:.2f}) {wm / tm:18.3f}x")
print(f"perplexity: wanda {w2[0]['perplexity']:.6f}, transformers {t[0]['perplexity']:.6f} "
      f"(relative {abs(w2[0]['perplexity'] / t[0]['perplexity'] - 1):.2e})")
a = np.fromfile(f"{out}/w-logits.f32", dtype=np.float32)
b = np.fromfile(f"{out}/t-logits.f32", dtype=np.float32)
if a.shape != b.shape:
    sys.exit(f"logit shapes differ: {a.shape} vs {b.shape}")
diff = np.abs(a - b)
print(f"window 0 logits: max |Δ| {diff.max():.3e}, max |Δ| / max |logit| {diff.max() / np.abs(b).max():.3e}")
PY
