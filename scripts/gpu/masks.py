"""Compares the zeros of two pruned checkpoints (`wanda prune --save DIR`, model.safetensors):
how many weights one pruned and the other kept. Prints one JSON object.
    python3 masks.py DIR_A DIR_B"""
import json, sys
from safetensors.torch import load_file

a, b = (load_file(f"{d}/model.safetensors") for d in sys.argv[1:3])
differing = total = 0
worst = ("", 0.0)
for name, x in a.items():
    if name not in b or x.dim() != 2 or "proj" not in name:
        continue
    d = int(((x == 0) != (b[name] == 0)).sum())
    size = x.numel()
    differing += d
    total += size
    if d / size > worst[1]:
        worst = (name, d / size)
print(json.dumps({"differing": differing, "weights": total, "fraction": differing / max(total, 1),
                  "worst": worst[0], "worst_fraction": worst[1]}))
