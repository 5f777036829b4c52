#!/bin/bash
# Every GPU figure of issue 25 in one command of at most $GPU_SECONDS (570) on a lent machine:
#   bash scripts/gpu/run.sh gpu-carry        (gpu-carry/ made here by scripts/gpu/pack.sh)
# 0. models: SmolLM2-135M-shaped (random, f32, by transformers: make_model.py), Llama-3.2-1B-shaped
#    and Llama-2-7B-shaped with 8 layers (`wanda synth`, bf16);
# 1. precision: dense perplexity of the 135M shape, 64 × 512, PyTorch and wanda in f32/bf16/f16
#    (wanda with each CUDA attention path), the logits compared (cmp.py);
# 2. memory: `wanda run cell.yaml` for each shape in memory (f32 and f16) and lean (f16 under a
#    budget that makes the gate lower the batch, keep the activations on the host and stream):
#    the gate's estimate beside the NVML device peak;
# 3. speed: a wanda cell (calibration $NSAMPLES × 2048, eval 16 × 2048) at each of $SPEED_SHAPES
#    (default "l1b") against torch_cell.py (the reference code's way), f32 then f16,
#    interleaved: wanda on empty kernel and token caches (`wanda-cold`: the run compiles its
#    kernels and tokenises both texts), then again on the same (`wanda`: it loads them), then
#    with WANDA_CUDA_ATTENTION=cublas (`wanda-cublas-attention`); with a second build in
#    gpu-carry/wanda-autotune(.gz), that one too; then the table of every cell (cell_table.py);
# 4. kernels (run before 3): GEMM GFLOP/s of a [4096 × 2048]·[2048 × 8192] product (a 1B layer's MLP on two
#    windows), `wanda bench gemm` (cuBLAS, then Burn's matmul) against PyTorch, f32 and f16; B7
#    (one 7B-shaped layer pruned) selecting on the device (by the selection kernel, then by
#    bisection in Burn's ops) and on the host;
# 5. sums: the zeros of the 135M shape pruned (wanda 50 % and 2:4, magnitude 50 %; f32 and
#    fp16) by gpu-carry/wanda and by gpu-carry/wanda-base, compared weight by weight (masks.py);
# 6. select: B7 of section 4 alone;
# 7. profile: one 1B-shaped fp16 cell ($PROFILE_SAMPLES × 2048, eval 2 × 2048) under CubeCL's
#    per-kernel profiler, summed by kernel (kernel_profile.py; cuBLAS's products are not in it),
#    and under nsys where the machine has it;
# 8. attention: B10, one layer's causal attention at the 1B (4 × 32 heads × 2048 × 64) and 7B
#    (head width 128) shapes, against PyTorch's scaled_dot_product_attention: in fp16 for each
#    flash tiling in $TILINGS (planes:seq_q:seq_kv, default "4:2:1 4:1:1"), then by cuBLAS and the
#    softmax kernel (WANDA_CUDA_ATTENTION=cublas) in fp16 and f32: the rate and the largest
#    difference to the blocked path.
# 9. load: at each of $LOAD_SHAPES (default "l1b l7b"), f32 then f16, gpu-carry/wanda-base and
#    gpu-carry/wanda one after the other: magnitude 50 % and 4 eval windows of 2048 (the flash
#    tiling pinned to 4:1:1, so the perplexities compare to the bit), load seconds and wall time.
# BASELINE (shapes, e.g. "l1b") adds, in section 3, a baseline for those shapes, tagged `base-…`:
# the build gpu-carry/wanda-base(.gz) where there is one (an earlier build, packed by pack.sh
# with BASE=FILE), else the same build under $BASELINE_ENV (default WANDA_DEVICE_SELECT=off, the
# pruning selection on the host; WANDA_CUBLAS=off gives Burn's matmul).
# SECTIONS (default "precision memory speed"; the others: kernels sums select profile attention
# load)
# picks the sections that run, SHAPES (default "m l1b l7b")
# the shapes section 2 measures; only the models a chosen section uses are made. WANDA_PHASE_TIMES=1
# (src/sys/phases.rs) adds each wanda run's seconds per phase to the log.
# Writes $OUT/log.txt, $OUT/results.jsonl (one JSON object per measurement, tagged) and
# $OUT/runs.tar.gz (run.json and memory_log.csv of every pipeline run).
here=$(cd "$(dirname "$0")" && pwd)
cd "$1" || exit 1
dir=$(pwd)
out=${OUT:-$dir/out}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
export PYTHONUNBUFFERED=1
start=$(date +%s)
limit=${GPU_SECONDS:-570}
nsamples=${NSAMPLES:-32}
sections=" ${SECTIONS:-precision memory speed} "
want() { [[ $sections == *" $1 "* ]]; }
# Binaries may travel gzipped (two builds exceed the device tool's carry limit otherwise).
for b in wanda wanda-autotune wanda-base; do
  [[ -f $b.gz && ! -f /tmp/$b ]] && gunzip -c "$b.gz" > "/tmp/$b"
  [[ -f $b ]] && cp "$b" "/tmp/$b"
  [[ -f /tmp/$b ]] && chmod +x "/tmp/$b"
done
W=/tmp/wanda
cp "$here/cell.yaml" .
# A step gets at most its own seconds and what is left of the whole limit.
step() {
  local s=$1 left=$((limit - $(date +%s) + start))
  shift
  ((left < s)) && s=$left
  ((s < 5)) && { echo "skipped (out of time): $*"; return 1; }
  echo "+ [$(($(date +%s) - start)) s] $*" >&2
  timeout "$s" "$@"
}
# record TAG SECONDS CMD…: CMD prints one JSON object; it goes to results.jsonl under TAG, with
# the process's wall time (`wall_s`: start-up, imports and device set-up included).
record() {
  local tag=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  step "$@" > /tmp/record.out
  t1=$(date +%s.%N)
  cat /tmp/record.out
  python3 -c "import json,sys
t=open('/tmp/record.out').read().strip().splitlines()
try: r=json.loads(t[-1])
except Exception: r=None
print(json.dumps({'tag': '$tag', 'wall_s': round($t1 - $t0, 3), 'result': r}))" | tee -a "$out/results.jsonl"
}
# pipeline TAG MODEL DEVICE BUDGET: one cell; its estimate, device peak and timings recorded.
pipeline() {
  local tag=$1 model=$2 device=$3 budget=$4
  step 120 "$W" run cell.yaml --set model.path="$model" --set device="$device" \
    --budget "$budget" --results "/tmp/r/$tag" 2>&1 | grep -E "gate|stream|rror|panic|halted" | tail -4
  python3 - "$tag" /tmp/r/$tag/gpu-cell/*/run.json <<'PY' | tee -a "$out/results.jsonl"
import json, sys
tag, runs = sys.argv[1], sys.argv[2:]
try: r = json.load(open(runs[0]))
except Exception: r = {}
m = r.get("memory", {})
print(json.dumps({"tag": tag, "result": {"estimated_peak_bytes": m.get("estimated_peak_bytes"),
    "peak_gpu_bytes": m.get("peak_gpu_bytes"), "effective": r.get("effective"),
    "timings": r.get("timings"), "perplexity": r.get("metrics", {}).get("perplexity")}}))
PY
}
# b7 DEVICE: B7, one Llama-2-7B-shaped layer pruned (16 calibration tokens: the selection and the
# weights' round trip dominate), selecting on the device (kernel, bisection) and on the host.
b7() {
  for sel in on bisection off; do
    WANDA_DEVICE_SELECT=$sel record "select-$sel-layer7b-$1" 90 "$W" bench prune-layer --shape llama2-7b --device "$1" --repeats 3 --json
  done
}
estimate() { # estimate MODEL [FLAGS…]: the estimator's peak bytes for cell.yaml's sizes
  local m=$1
  shift
  "$W" estimate --model "$m" --mode prune --method wanda --nsamples 16 --seqlen 512 --eval-seqlen 512 \
    --target cuda --json "$@" | python3 -c "import json,sys; print(json.load(sys.stdin)['peak_bytes'])"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# NVRTC for CubeCL's kernels, cuBLAS for the products (both from PyTorch's wheels if need be).
for lib in 'libnvrtc.so*' 'libcublas.so*'; do
  libs=$(dirname "$(find / -name "$lib" -not -path '/proc/*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH=$libs:$LD_LIBRARY_PATH
done

echo "== 0. models (those a wanted section uses)"
used=" "
want precision && used+="m "
want memory && used+="${SHAPES:-m l1b l7b} "
want speed && used+="${SPEED_SHAPES:-l1b} "
want sums && used+="m "
want profile && used+="l1b "
want load && used+="${LOAD_SHAPES:-l1b l7b} "
[[ $used == *" m "* ]] && step 90 python3 "$here/make_model.py" hf /tmp/m | tail -1
[[ $used == *" l1b "* ]] && step 60 "$W" synth --shape llama32-1b --dtype bf16 --tokenizer hf/tokenizer.json --out /tmp/l1b
[[ $used == *" l7b "* ]] && step 60 "$W" synth --shape llama2-7b --layers 8 --dtype bf16 --tokenizer hf/tokenizer.json --out /tmp/l7b

want precision && echo "== 1. precision (135M shape, 64 × 512)"
want precision && for dt in float32 bfloat16 float16; do
  record "torch-ppl-$dt" 60 python3 "$here/torch_ppl.py" /tmp/m wikitext2-raw-test.txt 512 64 "/tmp/t-$dt.bin" "$dt"
done
want precision && for d in cuda cuda-bf16 cuda-f16; do
  for a in flash cublas; do
    s=
    [[ $a == cublas ]] && s=-cublas-attention
    WANDA_CUDA_ATTENTION=$a record "wanda-ppl$s-$d" 90 "$W" eval --model /tmp/m --text wikitext2-raw-test.txt \
      --seqlen 512 --windows 64 --device "$d" --json --dump-logits "/tmp/w-$d$s.bin"
  done
done
want precision && step 30 python3 "$here/cmp.py" /tmp/t-float32.bin /tmp/t-bfloat16.bin /tmp/t-float16.bin /tmp/w-cuda*.bin

want memory && echo "== 2. memory (calibration 16 × 512, eval 4 × 512)"
want memory && for m in ${SHAPES:-m l1b l7b}; do
  pipeline "mem-$m-resident" "/tmp/$m" cuda:0 100GiB
  pipeline "mem-$m-resident-f16" "/tmp/$m" cuda:0-f16 100GiB
  # Lean: a budget between the estimates in memory and streamed at batch 1 with the activations
  # on the host, so the gate takes all three steps (it keeps 10 % headroom).
  a=$(estimate "/tmp/$m" --precision f16 --batch 1 --host-activations)
  b=$(estimate "/tmp/$m" --precision f16 --batch 1 --host-activations --streaming)
  pipeline "mem-$m-lean-f16" "/tmp/$m" cuda:0-f16 $(((a + b) * 10 / 18))
done

want kernels && echo "== 4. kernels (GEMM [4096 × 2048]·[2048 × 8192])"
want kernels && for p in "float32 cuda" "float16 cuda-f16"; do
  set -- $p
  record "torch-gemm-$1" 60 python3 "$here/torch_gemm.py" 4096 2048 8192 "$1"
  record "wanda-gemm-$2" 60 "$W" bench gemm --m 4096 --k 2048 --n 8192 --device "$2" --repeats 10 --json
  WANDA_CUBLAS=off record "burnmm-gemm-$2" 60 "$W" bench gemm --m 4096 --k 2048 --n 8192 --device "$2" --repeats 10 --json
  b7 "$2"
done
want load && [[ -x /tmp/wanda-base ]] && for shape in ${LOAD_SHAPES:-l1b l7b}; do
  echo "== 9. load ($shape shape, magnitude 50 %, eval 4 × 2048)"
  export WANDA_KERNEL_CACHE=/tmp/kernels-load
  for d in cuda cuda-f16; do
    for w in wanda-base wanda; do
      WANDA_FLASH_TILING=4:1:1 record "$w-load-$shape-$d" 120 "/tmp/$w" prune --model "/tmp/$shape" \
        --method magnitude --sparsity 0.5 --device "$d" --eval-text wikitext2-raw-test.txt \
        --eval-seqlen 2048 --windows 4 --json
    done
  done
done
want speed && for shape in ${SPEED_SHAPES:-l1b}; do
  echo "== 3. speed ($shape shape, calibration $nsamples × 2048, eval 16 × 2048)"
  for p in "float32 cuda" "float16 cuda-f16"; do
    set -- $p
    record "torch-cell-$shape-$1" 150 python3 "$here/torch_cell.py" "/tmp/$shape" wikitext2-v1-valid.txt wikitext2-raw-test.txt "$nsamples" 2048 16 "$1"
    # wanda twice on new caches: `wanda-cold` compiles every kernel, tokenises the texts and
    # hashes the checkpoint (and fills the caches), `wanda` reads them back, as every run after
    # a machine's first does. The autotuned build
    # twice: its first run includes the tuning (cached on disk after). Shapes in $BASELINE: the
    # same build under $BASELINE_ENV too.
    base=
    [[ " $BASELINE " == *" $shape "* ]] && base=base
    export WANDA_KERNEL_CACHE=/tmp/kernels-$shape-$2 WANDA_TOKEN_CACHE=/tmp/tokens-$shape-$2 \
      WANDA_DIGEST_CACHE=/tmp/digests-$shape-$2
    rm -rf "$WANDA_KERNEL_CACHE" "$WANDA_TOKEN_CACHE" "$WANDA_DIGEST_CACHE"
    for w in wanda-cold wanda wanda-cublas-attention wanda-autotune wanda-autotune-again $base; do
      b=/tmp/${w%-again}
      b=${b%-cold}
      b=${b%-cublas-attention}
      [[ $w == base && -x /tmp/wanda-base ]] && b=/tmp/wanda-base
      [[ $w == base && ! -x /tmp/wanda-base ]] && b=/tmp/wanda
      [[ -x $b ]] || continue
      ( [[ $w == base && $b == /tmp/wanda ]] && export "${BASELINE_ENV:-WANDA_DEVICE_SELECT=off}"
        [[ $w == wanda-cublas-attention ]] && export WANDA_CUDA_ATTENTION=cublas
        record "$w-cell-$shape-$2" 200 "$b" prune --model "/tmp/$shape" --method wanda --sparsity 0.5 --device "$2" \
        --calib-text wikitext2-v1-valid.txt --nsamples "$nsamples" --seqlen 2048 \
        --eval-text wikitext2-raw-test.txt --eval-seqlen 2048 --windows 16 --json )
    done
  done
done
want speed && python3 "$here/cell_table.py" "$out/results.jsonl"
want sums && [[ -x /tmp/wanda-base ]] && echo "== 5. sums (135M shape, wanda 50 % and 2:4, magnitude 50 %, calibration 32 × 512)"
want sums && [[ -x /tmp/wanda-base ]] && for d in cuda cuda-f16; do
  for p in "wanda --sparsity 0.5" "wanda --pattern 2:4" "magnitude --sparsity 0.5"; do
    tag=$d-${p%% *}-${p##* }
    for w in wanda wanda-base; do
      # shellcheck disable=SC2086 # $p is a method, a flag and its value
      step 60 "/tmp/$w" prune --model /tmp/m --method $p --device "$d" \
        --calib-text wikitext2-v1-valid.txt --nsamples 32 --seqlen 512 \
        --eval-text wikitext2-raw-test.txt --eval-seqlen 512 --windows 8 --save "/tmp/s-$w-$tag" --json | tail -1
    done
    record "masks-$tag" 60 python3 "$here/masks.py" "/tmp/s-wanda-$tag" "/tmp/s-wanda-base-$tag"
  done
done
want select && echo "== 6. select (B7, one Llama-2-7B-shaped layer)"
want select && for d in cuda cuda-f16; do
  b7 "$d"
done
want attention && echo "== 8. attention (causal, batch 4, 2048 positions)"
want attention && for d in 64 128; do
  record "torch-attention-$d" 60 python3 "$here/torch_attention.py" 4 32 2048 "$d" float16
  for t in ${TILINGS:-4:2:1 4:1:1}; do
    WANDA_FLASH_TILING=$t record "wanda-attention-$d-$t" 60 "$W" bench attention --batch 4 --heads 32 \
      --seq 2048 --head-dim "$d" --device cuda-f16 --repeats 5 --json
  done
  for d_type in "cuda-f16 float16" "cuda float32"; do
    set -- $d_type
    [[ $2 == float32 ]] && record "torch-attention-$d-f32" 60 python3 "$here/torch_attention.py" 4 32 2048 "$d" float32
    WANDA_CUDA_ATTENTION=cublas record "wanda-attention-$d-cublas-$1" 60 "$W" bench attention --batch 4 \
      --heads 32 --seq 2048 --head-dim "$d" --device "$1" --repeats 5 --json
  done
done
want profile && echo "== 7. profile (1B shape, fp16, calibration ${PROFILE_SAMPLES:-4} × 2048, eval 2 × 2048)"
want profile && for tool in cubecl nsys; do
  pre=(env CUBECL_DEBUG_LOG=/tmp/cubecl.log CUBECL_DEBUG_OPTION=profile)
  [[ $tool == nsys ]] && { command -v nsys || { echo "no nsys"; continue; }; }
  [[ $tool == nsys ]] && pre=(nsys profile -t cuda -o /tmp/nsys --force-overwrite true)
  step 120 "${pre[@]}" "$W" prune --model /tmp/l1b --method wanda --sparsity 0.5 --device cuda-f16 \
    --calib-text wikitext2-v1-valid.txt --nsamples "${PROFILE_SAMPLES:-4}" --seqlen 2048 \
    --eval-text wikitext2-raw-test.txt --eval-seqlen 2048 --windows 2 --json | tail -1
  [[ $tool == cubecl ]] && step 30 python3 "$here/kernel_profile.py" /tmp/cubecl.log 30
  [[ $tool == nsys ]] && step 60 nsys stats -q -r cuda_gpu_kern_sum -f csv /tmp/nsys.nsys-rep | cut -c1-220 | head -40
done
tar czf "$out/runs.tar.gz" -C /tmp r 2>/dev/null
echo "done in $(($(date +%s) - start)) s"
