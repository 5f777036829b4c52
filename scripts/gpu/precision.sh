#!/bin/bash
# Dense perplexity of the random SmolLM2-shaped model (see run.sh) on CUDA in f32 and bf16, PyTorch's in
# f32 and bf16 beside it, and each wanda run's speed.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
libs=$(dirname $(find / -name 'libnvrtc.so*' 2>/dev/null | head -1))
export LD_LIBRARY_PATH=$libs:$LD_LIBRARY_PATH
python3 make_model.py hf /tmp/m > /dev/null 2>&1 || exit 1
python3 torch_ppl.py /tmp/m wikitext2-raw-test.txt 512 64 /tmp/torch.bin 2>&1 | grep -v Loading
python3 torch_ppl.py /tmp/m wikitext2-raw-test.txt 512 64 /tmp/torch16.bin bfloat16 2>&1 | grep -v Loading
chmod +x wanda
for d in cuda cuda-bf16; do
  timeout 200 ./wanda eval --model /tmp/m --text wikitext2-raw-test.txt --seqlen 512 --windows 64 --device $d 2>&1 | grep -E "device|perplexity|time|rror|panic" | head -6
done
