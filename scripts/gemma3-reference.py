#!/usr/bin/env python3
"""Reference outputs for Gemma 3 270M (GGUF) from the PyTorch stack (transformers, f32, CPU).

Independent of wanda: transformers' own GGUF loader dequantizes the file (and un-offsets Gemma's
`1 + w` norms) and builds the tokenizer from the GGUF vocabulary. Writes to --out:

    config.json     the loaded model's config (transformers' view of the GGUF metadata)
    ids.u32         token ids of the whole --text, little-endian u32 (with the BOS the tokenizer adds)
    logits0.f32     logits of window 0 (ids[0:seqlen]), [seqlen, vocab] f32 row-major, little-endian
    ppl.json        perplexity over the first --windows windows of --seqlen ids by the Wanda protocol
                    (non-overlapping windows, NLL of the seqlen-1 shifted targets of each window,
                    ppl = exp(mean NLL)), with the per-window NLLs
    hidden16.f32    hidden states of a forward pass over ids[0:16] (output_hidden_states=True),
                    [layers+1, 16, hidden] f32: [0] = the scaled embedding, [l] = after decoder layer l-1;
                    what the last one is (after the final norm or not) is in meta.json
    meta.json       versions, timings, shapes, BOS handling, tokenizer facts

Same protocol as scripts/transformers-ppl.py. Runs in a venv with torch transformers gguf accelerate:

    ~/.cache/wanda-ab-venv/bin/python scripts/gemma3-reference.py --gguf demo/gemma-3-270m-q4_k_m.gguf \
        --text ../shared/data/wikitext-2/wikitext2-raw-test.txt --out ../gemma3-ref --windows 64
"""
import argparse, json, os, platform, resource, sys, time

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

p = argparse.ArgumentParser()
p.add_argument("--gguf", default="demo/gemma-3-270m-q4_k_m.gguf")
p.add_argument("--text", default="../shared/data/wikitext-2/wikitext2-raw-test.txt")
p.add_argument("--out", required=True, help="folder for the outputs (created)")
p.add_argument("--seqlen", type=int, default=512)
p.add_argument("--windows", type=int, default=64, help="windows for ppl.json (0: all of the text)")
p.add_argument("--hidden-tokens", type=int, default=16)
p.add_argument("--attn", default="eager", help="attn_implementation (eager: the plain softmax(QK^T)V)")
p.add_argument("--threads", type=int, default=os.cpu_count())
a = p.parse_args()
torch.set_num_threads(a.threads)
os.makedirs(a.out, exist_ok=True)
assert sys.byteorder == "little"


def out(name):
    return os.path.join(a.out, name)


folder, name = os.path.split(os.path.abspath(a.gguf))
t0 = time.time()
major = int(transformers.__version__.split(".")[0])
dtype_kw = {"dtype": torch.float32} if major >= 5 else {"torch_dtype": torch.float32}
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, attn_implementation=a.attn, **dtype_kw).eval()
load_s = time.time() - t0
t0 = time.time()
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
tok_load_s = time.time() - t0
model.config.to_json_file(out("config.json"), use_diff=False)

emb = model.get_input_embeddings().weight
tied = model.get_output_embeddings().weight.data_ptr() == emb.data_ptr()

text = open(a.text, encoding="utf-8").read()
t0 = time.time()
ids = tok(text, return_tensors="pt").input_ids
tokenize_s = time.time() - t0
ids[0].numpy().astype("<u4").tofile(out("ids.u32"))
bos_added = ids.shape[1] > 0 and ids[0, 0].item() == tok.bos_token_id

n = ids.shape[1] // a.seqlen
if a.windows:
    n = min(n, a.windows)
nlls, t0 = [], time.time()
with torch.no_grad():
    for i in range(n):
        w = ids[:, i * a.seqlen:(i + 1) * a.seqlen]
        logits = model(w).logits
        if i == 0:
            logits[0].float().numpy().astype("<f4").tofile(out("logits0.f32"))
        loss = torch.nn.functional.cross_entropy(logits[0, :-1].float(), w[0, 1:], reduction="sum")
        nlls.append(loss.item())
        del logits
        print(f"window {i + 1}/{n}: mean nll {nlls[-1] / (a.seqlen - 1):.4f} ({time.time() - t0:.0f} s)",
              file=sys.stderr, flush=True)
eval_s = time.time() - t0
mean = sum(nlls) / (n * (a.seqlen - 1))
ppl = {"perplexity": float(np.exp(mean)), "mean_nll": mean, "windows": n, "seqlen": a.seqlen,
       "tokens": n * a.seqlen, "text_tokens": ids.shape[1],
       "window_nll_sum": nlls, "window_nll_mean": [x / (a.seqlen - 1) for x in nlls],
       "protocol": "non-overlapping windows ids[i*seqlen:(i+1)*seqlen], i < windows; NLL of targets "
                   "w[1:] under logits[:-1] summed, mean over windows*(seqlen-1); ppl = exp(mean). "
                   "Only window 0 begins with the BOS the tokenizer put at the start of the text."}
json.dump(ppl, open(out("ppl.json"), "w"), indent=1)

# Layer-by-layer hidden states of the first hidden_tokens ids (a separate, shorter forward pass).
k = a.hidden_tokens
captured = {}
hooks = [model.model.layers[-1].register_forward_hook(
            lambda m, i, o: captured.__setitem__("last_layer", (o[0] if isinstance(o, tuple) else o).detach())),
         model.model.norm.register_forward_hook(lambda m, i, o: captured.__setitem__("final_norm", o.detach()))]
with torch.no_grad():
    r = model(ids[:, :k], output_hidden_states=True)
for h in hooks:
    h.remove()
hs = torch.stack([h[0] for h in r.hidden_states]).float()  # [layers+1, k, hidden]
hs.numpy().astype("<f4").tofile(out("hidden16.f32" if k == 16 else f"hidden{k}.f32"))
last_is_normed = bool(torch.equal(hs[-1], captured["final_norm"][0]))
last_is_raw = bool(torch.equal(hs[-1], captured["last_layer"][0]))
if not last_is_normed:  # keep the normed one too
    captured["final_norm"][0].float().numpy().astype("<f4").tofile(out(f"final_norm{k}.f32"))
emb_scale_ok = bool(torch.allclose(hs[0], emb[ids[0, :k]] * model.model.embed_tokens.embed_scale, rtol=0, atol=0))

c = model.config
meta = {
    "gguf": os.path.abspath(a.gguf), "text": os.path.abspath(a.text),
    "versions": {"python": platform.python_version(), "torch": torch.__version__,
                 "transformers": transformers.__version__, "numpy": np.__version__,
                 "gguf": __import__("importlib.metadata").metadata.version("gguf")},
    "threads": torch.get_num_threads(), "attn_implementation": c._attn_implementation,
    "load_seconds": load_s, "tokenizer_load_seconds": tok_load_s, "tokenize_seconds": tokenize_s,
    "eval_seconds": eval_s, "seconds_per_window": eval_s / max(n, 1),
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "tokenizer": {"class": type(tok).__name__, "add_bos_token": tok.add_bos_token,
                  "add_eos_token": tok.add_eos_token, "bos_token_id": tok.bos_token_id,
                  "bos_added_to_text": bos_added, "len": len(tok),
                  "backend": {k2: json.loads(tok.backend_tokenizer.to_str())[k2]
                              for k2 in ("normalizer", "pre_tokenizer", "post_processor", "decoder")}},
    "files": {"ids.u32": {"dtype": "u32le", "shape": [ids.shape[1]]},
              "logits0.f32": {"dtype": "f32le", "shape": [a.seqlen, int(c.vocab_size)]},
              "hidden16.f32": {"dtype": "f32le", "shape": list(hs.shape),
                               "index0": "embedding * sqrt(hidden_size) (input of layer 0)",
                               "last_is_after_final_norm": last_is_normed,
                               "last_is_raw_output_of_last_layer": last_is_raw,
                               "index0_equals_embedding_times_embed_scale": emb_scale_ok,
                               "embed_scale": float(model.model.embed_tokens.embed_scale)}},
    "lm_head_tied_to_embedding": tied,
    "layer_types": list(getattr(c, "layer_types", []) or []),
    "first_ids": ids[0, :32].tolist(),
    "first_tokens": tok.convert_ids_to_tokens(ids[0, :32].tolist()),
    "ppl": ppl["perplexity"],
}
json.dump(meta, open(out("meta.json"), "w"), indent=1)
print(json.dumps({"perplexity": ppl["perplexity"], "mean_nll": mean, "windows": n, "seqlen": a.seqlen,
                  "text_tokens": ids.shape[1], "bos_added": bos_added, "load_seconds": load_s,
                  "eval_seconds": eval_s, "out": os.path.abspath(a.out)}))
