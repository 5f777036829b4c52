# PyTorch's causal attention rate on the GPU for the shape `wanda bench attention` (B10) times:
# `scaled_dot_product_attention(q, k, v, is_causal=True)`, what transformers' Llama runs by
# default; prints one JSON line with the median GFLOP/s (the causal half of 4·b·h·s²·d, as B10
# counts) of 10 timed runs after 3 warm-up.
#   python3 torch_attention.py BATCH HEADS SEQ HEAD_DIM DTYPE
import json, statistics, sys, time
import torch
import torch.nn.functional as F

b, h, s, d = map(int, sys.argv[1:5])
dtype = getattr(torch, sys.argv[5])
q, k, v = (torch.rand(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
rates = []
for i in range(13):
    torch.cuda.synchronize()
    t = time.time()
    F.scaled_dot_product_attention(q, k, v, is_causal=True)[0, 0, 0, 0].item()
    if i >= 3:
        rates.append(2 * b * h * s * s * d / (time.time() - t) / 1e9)
print(json.dumps({"figure": f"torch attention {b}x{h}x{s}x{d} {sys.argv[5]}", "unit": "GFLOP/s",
                  "median": statistics.median(rates), "min": min(rates), "max": max(rates)}))
