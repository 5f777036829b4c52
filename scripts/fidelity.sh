#!/usr/bin/env bash
# Fidelity table: the same pruning cells run by `wanda prune` and by the reference code's way in
# PyTorch (scripts/torch-wanda-cell.py), on the same model (SmolLM2, or the GGUF file $AB_GGUF),
# calibration draw (32 × 512 of WikiText-2 valid, seed 0) and evaluation (64 windows × 512 of
# WikiText-2 test). Prints one markdown row per cell: both perplexities, their relative
# difference, prune seconds and peak RSS of each, and the first layer whose masks differ with
# how many of its weights do (scripts/compare-masks.py; "none" when every mask is the same).
# With $KEEP=DIR each cell's pruned weights stay in DIR/CELL/ (wanda's saved folder, the port's
# `theirs.safetensors` and its `scaler.safetensors`) for `compare-masks.py --scaler`. A measuring
# tool, not a test: CI never runs it.
#
#   scripts/fidelity.sh [CELL...]     # CELL = METHOD:SPARSITY or METHOD:N:M, e.g. wanda:0.7 sparsegpt:2:4,
#                                     # with +owl (OWL profile) and/or +dsnot (DSnoT), e.g. wanda:0.7+owl
#
# Default cells: wanda at 0.5, 0.6, 0.7, 0.8; magnitude and sparsegpt at 0.7. Set
# TORCH_ISA=avx2 to hold PyTorch to its AVX2 kernels (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
# MKL_ENABLE_INSTRUCTIONS): the reference's own figure at a chaotic setting moves with the ISA.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ab-common.sh
cells=("$@")
[ ${#cells[@]} -gt 0 ] || cells=(wanda:0.5 wanda:0.6 wanda:0.7 wanda:0.8 magnitude:0.7 sparsegpt:0.7)
isa_env=()
if [ "${TORCH_ISA:-}" = avx2 ]; then
  isa_env=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2)
fi

echo "| cell | wanda ppl | PyTorch ppl | relative | wanda prune s | PyTorch prune s | wanda RSS GiB | PyTorch RSS GiB | masks part at |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
for cell in "${cells[@]}"; do
  cell_flags "$cell"
  dir="$out/$cell"
  [ -z "${KEEP:-}" ] || dir="$KEEP/$cell"
  rm -rf "$dir" && mkdir -p "$dir"
  "$wanda" prune --model "$model" --method "$method" "${ours[@]}" --calib-text "$calib" \
    --nsamples 32 --seqlen 512 --seed 0 --eval-text "$text" --eval-seqlen 512 --windows 64 \
    --device "$device" --save "$dir/wanda" --dtype f32 --json > "$out/w.json"
  env "${isa_env[@]}" "$venv/bin/python" scripts/torch-wanda-cell.py --gguf "$model" \
    "${hf_args[@]}" --calib-text "$calib" --eval-text "$text" --nsamples 32 --seqlen 512 \
    --seed 0 --method "$method" "${theirs[@]}" --windows 64 --save-pruned "$dir/theirs.safetensors" \
    --dump-scaler "$dir/scaler.safetensors" > "$out/t.json" 2> "$out/t.err" \
    || { cat "$out/t.err" >&2; exit 2; }
  "$venv/bin/python" scripts/compare-masks.py "$dir/wanda" "$dir/theirs.safetensors" > "$out/masks.txt"
  [ -n "${KEEP:-}" ] || rm -rf "$dir"
  python3 - "$out" "$cell" <<'PY'
import json, sys
out, cell = sys.argv[1], sys.argv[2]
w, t = json.load(open(f"{out}/w.json")), json.load(open(f"{out}/t.json"))
pw, pt = w["perplexity"]["perplexity"], t["perplexity"]
layers = [r.split() for r in open(f"{out}/masks.txt").read().splitlines()[1:]]
parted = next((f"layer {r[0]} ({r[3]} weights)" for r in layers if int(r[3]) > 0), "none")
print(f"| {cell} | {pw:.4f} | {pt:.4f} | {pw / pt - 1:+.2e} | {w['prune_seconds']:.1f} | "
      f"{t['prune_seconds']:.1f} | {w['peak_rss_bytes'] / 2**30:.2f} | {t['peak_rss_bytes'] / 2**30:.2f} | {parted} |")
if w["calibration"] and w["calibration"]["offsets"] != t["calibration_offsets"]:
    sys.exit(f"{cell}: the calibration offsets differ")
PY
done
