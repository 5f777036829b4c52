# PyTorch's GEMM rate on the GPU for the shape `wanda bench gemm` times, TF32 off as in
# torch_cell.py; prints one JSON line with the median GFLOP/s of 10 timed runs (after 3 warm-up).
#   python3 torch_gemm.py M K N DTYPE
import json, statistics, sys, time
import torch

m, k, n = map(int, sys.argv[1:4])
dtype = getattr(torch, sys.argv[4])
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.rand(m, k, device="cuda", dtype=dtype)
b = torch.rand(k, n, device="cuda", dtype=dtype)
rates = []
for i in range(13):
    torch.cuda.synchronize()
    t = time.time()
    (a @ b)[0, 0].item()
    if i >= 3:
        rates.append(2 * m * k * n / (time.time() - t) / 1e9)
print(json.dumps({"figure": f"torch gemm {m}x{k}·{k}x{n} {sys.argv[4]}", "unit": "GFLOP/s",
                  "median": statistics.median(rates), "min": min(rates), "max": max(rates)}))
