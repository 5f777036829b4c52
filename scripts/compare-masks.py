#!/usr/bin/env python3
"""Compares the pruned linears of two models layer by layer: a `wanda prune --save DIR` folder
(or any safetensors file/folder) against `scripts/torch-wanda-cell.py --save-pruned FILE`. For
each linear it prints the share of weights whose keep/prune decision differs and the relative
difference of the kept weights (per layer also how many weights differ), so the first layer
where the two implementations part shows itself. With `--scaler` (the file of
`torch-wanda-cell.py --dump-scaler`) it also lists, for the first layer that differs, every
row's swapped weights with their Wanda scores `|w|·sqrt(scaler)` and the pair's relative gap, to tell a near-tie from a different computation; such a pair can be
handed back to the port as `--swap LINEAR:ROW:PRUNE:KEEP` (a near-tie of the initial mask) or, in
a linear DSnoT refined, `--swap-order LINEAR:ROW:PRUNE:KEEP` (a near-tie of DSnoT's pruning
order). A diagnostic tool, not a test.

    python scripts/compare-masks.py OURS_DIR_OR_FILE THEIRS_FILE [--all] [--scaler FILE]
"""
import argparse, glob, os, sys

import torch
from safetensors.torch import load_file

p = argparse.ArgumentParser()
p.add_argument("ours")
p.add_argument("theirs")
p.add_argument("--all", action="store_true", help="print every linear, not only a per-layer line")
p.add_argument("--scaler", help="the reference's scaler rows (`torch-wanda-cell.py --dump-scaler`)")
a = p.parse_args()


def load(path):
    files = sorted(glob.glob(os.path.join(path, "*.safetensors"))) if os.path.isdir(path) else [path]
    out = {}
    for f in files:
        out.update(load_file(f))
    return out


def layer_of(name):
    """The decoder layer index in `model.layers.N.…` (OPT's `model.decoder.layers.N.…`,
    BLOOM's `transformer.h.N.…`)."""
    parts = name.split(".")
    return int(parts[parts.index("layers" if "layers" in parts else "h") + 1])


def experts_apart(tensors):
    """GPT-OSS's and Llama 4's 3-D expert stacks (`…mlp.experts.gate_up_proj` and
    `…feed_forward.experts.gate_up_proj`, `[experts, in, 2·out]`, gate and up interleaved
    (GPT-OSS) or in halves (Llama 4); `…experts.down_proj`, `[experts, in, out]`) as each
    expert's linears, `…experts.E.gate_proj.weight` and so on in `[out, in]`, as the reference
    saves them."""
    for name in [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        stack, prefix = tensors.pop(name), name[:-len("gate_up_proj" if name.endswith("gate_up_proj") else "down_proj")]
        halves = ".feed_forward." in name
        for e in range(stack.shape[0]):
            if name.endswith("gate_up_proj"):
                half = stack.shape[-1] // 2
                gate, up = (slice(0, half), slice(half, None)) if halves else (slice(0, None, 2), slice(1, None, 2))
                tensors[f"{prefix}{e}.gate_proj.weight"] = stack[e][:, gate].t()
                tensors[f"{prefix}{e}.up_proj.weight"] = stack[e][:, up].t()
            else:
                tensors[f"{prefix}{e}.down_proj.weight"] = stack[e].t()
    return tensors


def granite_experts_apart(tensors):
    """Granite's expert stacks (`…block_sparse_moe.input_linear.weight`, `[experts, 2·out, in]`,
    each expert's gate rows then its up rows; `…output_linear.weight`, `[experts, out, in]`) as
    each expert's linears, `…block_sparse_moe.experts.E.gate_proj.weight` and so on, as the
    reference saves them."""
    for name in [n for n in tensors if n.endswith(("block_sparse_moe.input_linear.weight",
                                                   "block_sparse_moe.output_linear.weight"))]:
        stack = tensors.pop(name)
        prefix = name[:name.index("block_sparse_moe.") + len("block_sparse_moe.")] + "experts."
        for e in range(stack.shape[0]):
            if name.endswith("input_linear.weight"):
                half = stack.shape[1] // 2
                tensors[f"{prefix}{e}.gate_proj.weight"] = stack[e][:half]
                tensors[f"{prefix}{e}.up_proj.weight"] = stack[e][half:]
            else:
                tensors[f"{prefix}{e}.down_proj.weight"] = stack[e]
    return tensors


ours, theirs = granite_experts_apart(experts_apart(load(a.ours))), load(a.theirs)
names = sorted((n for n in theirs if n in ours), key=lambda n: (layer_of(n), n))
if not names:
    sys.exit("no tensor names in common")
layer_rows = {}
for n in names:
    x, y = ours[n].float(), theirs[n].float()
    if x.shape != y.shape:
        sys.exit(f"{n}: shapes differ {tuple(x.shape)} vs {tuple(y.shape)}")
    parts = (x == 0) != (y == 0)
    differ = parts.float().mean().item()
    kept = (x != 0) & (y != 0)
    rel = ((x - y)[kept].norm() / y[kept].norm().clamp_min(1e-30)).item()
    layer = layer_of(n)
    acc = layer_rows.setdefault(layer, [0.0, 0.0, 0, 0])
    acc[0] += differ; acc[1] = max(acc[1], rel); acc[2] += 1
    acc[3] += int(parts.sum())
    if a.all:
        print(f"{n:50} mask differs {differ:9.6f}  kept rel diff {rel:.3e}")
print(f"{'layer':>5} {'mean mask differs':>18} {'max kept rel diff':>18} {'weights differing':>18}")
for layer, (d, r, k, count) in sorted(layer_rows.items()):
    print(f"{layer:5} {d / k:18.6f} {r:18.3e} {count:18}")

if a.scaler:
    scaler = load_file(a.scaler)
    first = None
    for n in names:
        x, y = ours[n].float(), theirs[n].float()
        differ = (x == 0) != (y == 0)
        if not differ.any() or (first is not None and layer_of(n) != first):
            continue
        first = layer_of(n)
        linear = n[:-len(".weight")]
        for row in torch.nonzero(differ.any(1)).flatten().tolist():
            cols = torch.nonzero(differ[row]).flatten().tolist()
            w = torch.where(x[row] != 0, x[row], y[row])   # each value from the side that kept it
            score = w.abs() * torch.sqrt(scaler[f"{linear}.scaler"])
            pruned = [c for c in cols if x[row, c] == 0]
            kept = [c for c in cols if x[row, c] != 0]
            values = [score[c].item() for c in cols]
            gap = (max(values) - min(values)) / max(values) if max(values) > 0 else 0.0
            print(f"{linear} row {row}: ours prunes {pruned} keeps {kept}, scores "
                  + ", ".join(f"{score[c].item():.9g}" for c in cols) + f", relative gap {gap:.2e}"
                  + (f"  (--swap or --swap-order {linear}:{row}:{pruned[0]}:{kept[0]})"
                     if len(cols) == 2 else ""))
