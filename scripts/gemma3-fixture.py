#!/usr/bin/env python3
"""The compact reference tests/it/gemma3.rs checks wanda against, from the folder
scripts/gemma3-reference.py wrote (numpy only; the logits file stays out of the repository):

    python3 scripts/gemma3-fixture.py ../gemma3-ref tests/fixtures/gemma3-270m-reference.json

Writes: the token count, SHA-256 and first 64 ids of the whole text; for rows 0, 1, 255 and 511
of window 0 the largest logit, the top 8 ids with their logits and the logits of 16 fixed ids;
the per-window NLL sums and the perplexity of the first 64 windows; the versions that made them.
"""
import hashlib
import json
import os
import sys

import numpy as np

ref, fixture = sys.argv[1], sys.argv[2]
meta = json.load(open(os.path.join(ref, "meta.json")))
ppl = json.load(open(os.path.join(ref, "ppl.json")))
raw = open(os.path.join(ref, "ids.u32"), "rb").read()
ids = np.frombuffer(raw, dtype="<u4")
seqlen, vocab = meta["files"]["logits0.f32"]["shape"]
logits = np.fromfile(os.path.join(ref, "logits0.f32"), dtype="<f4").reshape(seqlen, vocab)
probe = [0, 1, 2, 3, 106, 107, 236743, 818, 1000, 4096, 100000, 200000, 262143, 50, 7, 9999]
rows = {}
for r in (0, 1, 255, 511):
    row = logits[r]
    top = np.argsort(-row, kind="stable")[:8]
    rows[str(r)] = {"max": float(row.max()), "top_ids": top.tolist(),
                    "top_logits": [float(row[i]) for i in top],
                    "probe_logits": [float(row[i]) for i in probe]}
out = {
    "made_by": "scripts/gemma3-reference.py + scripts/gemma3-fixture.py",
    "versions": meta["versions"],
    "gguf_sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    "text": "wikitext2-raw-test.txt (as read, BOS added by the tokenizer)",
    "ids": {"count": int(ids.size), "sha256_u32le": hashlib.sha256(raw).hexdigest(),
            "first": ids[:64].tolist()},
    "window0": {"seqlen": seqlen, "probe_ids": probe, "rows": rows},
    "perplexity": {"seqlen": ppl["seqlen"], "windows": ppl["windows"],
                   "value": ppl["perplexity"], "window_nll_sum": ppl["window_nll_sum"]},
}
json.dump(out, open(fixture, "w"), indent=1)
print(fixture, "written:", ids.size, "ids; ppl", ppl["perplexity"])
