#!/usr/bin/env python3
"""Reference perplexity with the PyTorch stack (transformers, f32, CPU) by the Wanda protocol.

Independent of wanda: it loads the same GGUF through transformers' own GGUF loader and prints
one JSON object like `wanda eval --json` (perplexity, windows, seqlen, tokens). Use it to check
wanda's numbers; CI never runs it.

    python3 -m venv ~/venv-ab && ~/venv-ab/bin/pip install torch transformers gguf accelerate
    ~/venv-ab/bin/python scripts/transformers-ppl.py --gguf demo/SmolLM2-135M-Instruct.Q4_1.gguf \
        --hf-dir ../shared/models/smollm2-135m-hf --text demo/wikitext2-raw-test.txt --seqlen 512 --windows 64

`--folder DIR` instead of `--gguf` loads a Hugging Face folder (model and tokenizer), e.g. one
`wanda prune --save` wrote, to check that a saved copy scores in transformers as in wanda.
"""
import argparse, json, os, time

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

p = argparse.ArgumentParser()
src = p.add_mutually_exclusive_group(required=True)
src.add_argument("--gguf")
src.add_argument("--folder", help="a Hugging Face folder (config, weights, tokenizer)")
p.add_argument("--hf-dir", help="a folder with config.json + tokenizer.json to use instead of the "
               "GGUF's (transformers 4.45 converts SmolLM2's GGUF with an untied, random LM head)")
p.add_argument("--tokenizer-json", action="store_true",
               help="with --folder: its tokenizer.json itself, as wanda reads it (AutoTokenizer picks "
                    "the family's tokenizer class, which refuses a word-level fixture tokenizer)")
p.add_argument("--text", required=True)
p.add_argument("--seqlen", type=int, default=512)
p.add_argument("--windows", type=int)
p.add_argument("--threads", type=int, default=os.cpu_count())
p.add_argument("--dump-logits", help="write the first window's logits (float32, raw) here")
p.add_argument("--bench-forward", type=int, default=0, metavar="N",
               help="also time N forward passes of one window (B1, after one warm-up), with the "
               "token pattern `wanda bench forward` uses")
a = p.parse_args()
torch.set_num_threads(a.threads)

import transformers
dtype = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": torch.float32}
t0 = time.time()
if a.folder:
    folder, name = a.folder, None
    model = AutoModelForCausalLM.from_pretrained(folder, **dtype).eval()
else:
    folder, name = os.path.split(os.path.abspath(a.gguf))
    extra = {"config": AutoConfig.from_pretrained(a.hf_dir)} if a.hf_dir else {}
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, **dtype, **extra).eval()
load_s = time.time() - t0
if a.folder and a.tokenizer_json:
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"))
elif a.folder:
    tok = AutoTokenizer.from_pretrained(folder)
elif a.hf_dir:
    tok = AutoTokenizer.from_pretrained(a.hf_dir)
else:
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
text = open(a.text, encoding="utf-8").read()
ids = tok(text, return_tensors="pt").input_ids
n = ids.shape[1] // a.seqlen
if a.windows:
    n = min(n, a.windows)
nll, t0 = 0.0, time.time()
with torch.no_grad():
    for i in range(n):
        w = ids[:, i * a.seqlen:(i + 1) * a.seqlen]
        logits = model(w).logits
        if i == 0 and a.dump_logits:
            logits[0].float().numpy().tofile(a.dump_logits)
        loss = torch.nn.functional.cross_entropy(logits[0, :-1].float(), w[0, 1:], reduction="sum")
        nll += loss.item()
eval_s = time.time() - t0
mean = nll / (n * (a.seqlen - 1))
forward_tps = []
if a.bench_forward:
    vocab = model.config.vocab_size
    pattern = torch.tensor([[(i * 7919 + 13) % vocab for i in range(a.seqlen)]])
    with torch.no_grad():
        model(pattern)
        for _ in range(a.bench_forward):
            t1 = time.time()
            model(pattern).logits[0, -1].sum().item()
            forward_tps.append(a.seqlen / (time.time() - t1))
import resource
print(json.dumps({"perplexity": float(torch.tensor(mean).exp()), "mean_nll": mean, "windows": n,
                  "seqlen": a.seqlen, "tokens": n * a.seqlen, "text_tokens": ids.shape[1],
                  "load_seconds": load_s, "eval_seconds": eval_s,
                  "tokens_per_second": n * a.seqlen / eval_s, "forward_tokens_per_second": forward_tps,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "torch": torch.__version__, "threads": torch.get_num_threads()}))
