#!/usr/bin/env python3
"""Decoding speed of the PyTorch stack (transformers, f32, CPU) as `wanda bench decode` (B12)
measures it: one prefill of `--prompt` tokens, then `--tokens` steps of one token each with the KV
cache, the same fixed ids (`(i * 7919 + 13) % vocab`), each step's logits read. Prints one JSON
object: prefill and decode tokens/s per run. A benchmark tool; CI never runs it.

    ~/.cache/wanda-ab-venv/bin/python scripts/torch-decode.py \
        --gguf ../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --hf-dir ../shared/models/smollm2-135m-hf --prompt 128 --tokens 64 --repeats 3
"""
import argparse, json, os, time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

p = argparse.ArgumentParser()
src = p.add_mutually_exclusive_group(required=True)
src.add_argument("--gguf")
src.add_argument("--folder", help="a Hugging Face folder")
p.add_argument("--hf-dir", help="config.json to use instead of the GGUF's")
p.add_argument("--prompt", type=int, default=128)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--repeats", type=int, default=3)
p.add_argument("--threads", type=int, default=os.cpu_count())
a = p.parse_args()
torch.set_num_threads(a.threads)

dtype = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": torch.float32}
if a.folder:
    model = AutoModelForCausalLM.from_pretrained(a.folder, **dtype).eval()
else:
    folder, name = os.path.split(os.path.abspath(a.gguf))
    extra = {"config": AutoConfig.from_pretrained(a.hf_dir)} if a.hf_dir else {}
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, **dtype, **extra).eval()
vocab = model.config.vocab_size
ids = [(i * 7919 + 13) % vocab for i in range(a.prompt + a.tokens)]
prefill, decode = [], []
with torch.no_grad():
    for run in range(a.repeats + 1):
        started = time.perf_counter()
        out = model(torch.tensor([ids[: a.prompt]]), use_cache=True)
        out.logits[0, -1, 0].item()
        prefilled = time.perf_counter() - started
        past = out.past_key_values
        started = time.perf_counter()
        for step in range(a.prompt, a.prompt + a.tokens):
            out = model(torch.tensor([[ids[step]]]), past_key_values=past, use_cache=True)
            out.logits[0, -1, 0].item()
            past = out.past_key_values
        if run > 0:
            prefill.append(a.prompt / prefilled)
            decode.append(a.tokens / (time.perf_counter() - started))
print(json.dumps({"prefill_tokens_per_second": prefill, "decode_tokens_per_second": decode,
                  "torch": torch.__version__, "transformers": transformers.__version__,
                  "threads": torch.get_num_threads()}))
