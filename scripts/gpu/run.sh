#!/bin/bash
# On a GPU machine with PyTorch and transformers but no network: a random SmolLM2-shaped model
# (the real one does not travel), PyTorch's perplexity and logits as the reference, wanda on
# CUDA and on the CPU, then the pipelines named as arguments (resident-cuda, streamed-cuda,
# resident-cpu). The folder it runs in holds these scripts and pipelines, a stripped
# `cargo build --release --features cuda` binary named `wanda`, `hf/` (config.json and
# tokenizer files of ../shared/models/smollm2-135m-hf) and the two WikiText-2 texts of
# ../shared/data/wikitext-2. Records and memory logs are copied to $OUT.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
libs=$(dirname $(find / -name 'libnvrtc.so*' 2>/dev/null | head -1)):$(dirname $(find / -name 'libcuda.so*' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$libs:$LD_LIBRARY_PATH
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
ls $(echo $libs | cut -d: -f1) | grep -i nvrtc | head -5
python3 make_model.py hf /tmp/m || exit 1
grep -A3 rope /tmp/m/config.json
python3 torch_ppl.py /tmp/m wikitext2-raw-test.txt 512 8 /tmp/torch.bin
chmod +x wanda
for d in cuda cpu; do

  timeout 240 ./wanda eval --model /tmp/m --text wikitext2-raw-test.txt --seqlen 512 --windows 8 --device $d --dump-logits /tmp/$d.bin 2>&1 | tail -8

done
python3 cmp.py /tmp/torch.bin /tmp/cuda.bin /tmp/cpu.bin
for p in "$@"; do
  timeout 240 ./wanda run $p.yaml --results /tmp/r 2>&1 | grep -v "^\s*$" | tail -28
  for f in /tmp/r/gpu-$p/*/run.json /tmp/r/gpu-$p/*/memory_log.csv; do cp "$f" "$OUT/$p-$(basename $f)"; done
done
