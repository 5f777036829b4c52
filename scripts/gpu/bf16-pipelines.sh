#!/bin/bash
# The pipelines in bfloat16 on CUDA (in memory and streamed), beside f32 in memory; set up as
# for run.sh.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
libs=$(dirname $(find / -name 'libnvrtc.so*' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$libs:$LD_LIBRARY_PATH
python3 make_model.py hf /tmp/m > /dev/null 2>&1 || exit 1
chmod +x wanda
for p in resident-cuda resident-bf16 streamed-bf16; do
  timeout 150 ./wanda run $p.yaml --results /tmp/r 2>&1 | grep -v "^\s*$" | grep -E "gate|streaming|estimated|finished|Peak|rror|panic"
  for f in /tmp/r/gpu-$p/*/run.json; do cp "$f" "$OUT/$p-$(basename $f)"; done
done
