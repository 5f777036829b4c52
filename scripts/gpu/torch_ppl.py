# Perplexity by the Wanda reference protocol in PyTorch on the GPU (f32 unless a dtype is given:
# bfloat16, float16); dumps window 0's logits; prints one JSON line.
import math, sys, numpy as np, torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from transformers import LlamaForCausalLM
d, text, seqlen, windows, dump = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
dtype = getattr(torch, sys.argv[6]) if len(sys.argv) > 6 else torch.float32
import time
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
ids = Tokenizer.from_file(f"{d}/tokenizer.json").encode(open(text).read()).ids
print("tokens", len(ids))
model = LlamaForCausalLM.from_pretrained(d, dtype=dtype).cuda().eval()
start = time.time()
nll = 0.0
with torch.no_grad():
    for w in range(windows):
        x = torch.tensor(ids[w * seqlen:(w + 1) * seqlen], device="cuda")[None]
        logits = model(x).logits.float()
        nll += F.cross_entropy(logits[0, :-1], x[0, 1:], reduction="sum").item()
        if w == 0:
            logits[0].cpu().numpy().astype("<f4").tofile(dump)
torch.cuda.synchronize()
import json
print(json.dumps({"torch": str(dtype), "perplexity": math.exp(nll / (windows * (seqlen - 1))),
                  "tokens_per_second": windows * seqlen / (time.time() - start)}))
