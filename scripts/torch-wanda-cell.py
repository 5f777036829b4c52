#!/usr/bin/env python3
"""One whole pruning cell with the PyTorch stack, done the way the Wanda reference code
(github.com/locuslab/wanda, `lib/prune.py: prune_wanda, prune_magnitude, prune_sparsegpt`,
`lib/sparsegpt.py`, `lib/eval.py: eval_ppl_wikitext`) does it: load, calibrate + prune layer by
layer, evaluate WikiText-2 perplexity. `--method` picks wanda (default), magnitude, sparsegpt or
ria (biomedical-cybernetics/Relative-importance-and-activation-pruning `prune_ria`, its defaults),
`--pattern` unstructured (default) or N:M; `--save-pruned` writes the pruned linears so masks
can be compared with a `wanda prune --save` folder (scripts/compare-masks.py). It is the bar B3 is
measured against (`scripts/ab-transformers.sh` runs it); CI never runs it.

What it does, step by step, as the reference does:
- calibration windows: `random.seed(seed)`, then per sample `i = random.randint(0, n - seqlen - 1)`
  over the tokenised calibration text (its `get_wikitext2`); the offsets are printed so they can
  be compared with `wanda prune --json`;
- the inputs of decoder layer 0 are caught for every sample; for each layer, every sample runs
  through it one at a time with forward hooks on the seven linears accumulating
  `scaler_row = mean over samples of ‖x_j‖²` (its `WrappedGPT.add_batch`); each linear is pruned
  by `|W| · sqrt(scaler_row)`, the lowest `int(cols · ratio)` per output row (stable sort); then
  every sample runs through the pruned layer again to give the next layer's inputs;
- evaluation: consecutive windows of `seqlen` tokens of the test text, next-token cross-entropy,
  perplexity = exp(mean NLL).

Prints one JSON object: load, prune and eval seconds, whole wall time, peak RSS, perplexity,
calibration offsets.

    AB_VENV=~/.cache/wanda-ab-venv; python3 -m venv $AB_VENV
    $AB_VENV/bin/pip install torch transformers gguf accelerate
    $AB_VENV/bin/python scripts/torch-wanda-cell.py --gguf ../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --hf-dir ../shared/models/smollm2-135m-hf \
        --calib-text ../shared/data/wikitext-2/wikitext2-v1-valid.txt \
        --eval-text ../shared/data/wikitext-2/wikitext2-raw-test.txt
"""
import argparse, json, math, os, random, resource, time

T_START = time.time()

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

p = argparse.ArgumentParser()
p.add_argument("--gguf", required=True)
p.add_argument("--hf-dir", help="config.json + tokenizer.json to use instead of the GGUF's")
p.add_argument("--calib-text", required=True)
p.add_argument("--eval-text", required=True)
p.add_argument("--nsamples", type=int, default=32)
p.add_argument("--seqlen", type=int, default=512)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--sparsity", type=float, default=0.5)
p.add_argument("--method", choices=["wanda", "magnitude", "sparsegpt", "ria"], default="wanda")
p.add_argument("--pattern", default="unstructured", help="`unstructured` or N:M, e.g. 2:4")
p.add_argument("--ria-reallocation", action="store_true",
               help="ria with N:M: the reference's `--reallocation` (zig-zag channel permutation, "
               "without its LSA refinement)")
p.add_argument("--save-pruned", help="write the pruned linears here (safetensors, HF names, f32)")
p.add_argument("--windows", type=int, default=64)
p.add_argument("--threads", type=int, default=os.cpu_count())
p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
               help="compute everything (forward, statistics, pruning) in this precision; float64 "
               "shows what the cell gives without f32 rounding")
a = p.parse_args()
DT = getattr(torch, a.dtype)
# The reference accumulates statistics in f32 (`inp.type(torch.float32)`); float64 keeps f64.
STAT_DT = torch.float64 if DT == torch.float64 else torch.float32
torch.set_num_threads(a.threads)
prune_n, prune_m = (0, 0) if a.pattern == "unstructured" else map(int, a.pattern.split(":"))

# Load.
t0 = time.time()
folder, name = os.path.split(os.path.abspath(a.gguf))
extra = {"config": AutoConfig.from_pretrained(a.hf_dir)} if a.hf_dir else {}
model = AutoModelForCausalLM.from_pretrained(
    folder, gguf_file=name, torch_dtype=torch.float32, **extra).eval().to(DT)
model.config.use_cache = False
tok = AutoTokenizer.from_pretrained(a.hf_dir) if a.hf_dir else AutoTokenizer.from_pretrained(
    folder, gguf_file=name)
load_s = time.time() - t0

# Calibrate and prune.
t0 = time.time()
calib_ids = tok(open(a.calib_text, encoding="utf-8").read(), return_tensors="pt").input_ids
random.seed(a.seed)
offsets = [random.randint(0, calib_ids.shape[1] - a.seqlen - 1) for _ in range(a.nsamples)]
samples = [calib_ids[:, i:i + a.seqlen] for i in offsets]

layers = model.model.layers
hidden = model.config.hidden_size
inps = torch.zeros((a.nsamples, a.seqlen, hidden), dtype=DT)
layer_kwargs = {}


class Catcher(torch.nn.Module):
    """Stands in for layer 0: keeps its input and keyword arguments, then stops the forward."""

    def __init__(self, module):
        super().__init__()
        self.module = module
        self.index = 0

    def forward(self, x, **kwargs):
        inps[self.index] = x[0]
        self.index += 1
        layer_kwargs.update(kwargs)
        raise ValueError


layers[0] = Catcher(layers[0])
with torch.no_grad():
    for s in samples:
        try:
            model(s)
        except ValueError:
            pass
layers[0] = layers[0].module
outs = torch.zeros_like(inps)


def run_layer(layer, x):
    out = layer(x.unsqueeze(0), **layer_kwargs)
    return (out[0] if isinstance(out, tuple) else out)[0]


LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def nm_mask(metric):
    """The reference's N:M mask: the `prune_n` lowest of every `prune_m` consecutive columns."""
    mask = torch.zeros_like(metric, dtype=torch.bool)
    for ii in range(0, metric.shape[1], prune_m):
        tmp = metric[:, ii:ii + prune_m].to(STAT_DT)
        mask.scatter_(1, ii + torch.topk(tmp, prune_n, dim=1, largest=False)[1], True)
    return mask


def wanda_prune(m, scaler):
    """locuslab/wanda `prune_wanda`: |W| · sqrt(scaler_row), lowest per output row (stable)."""
    metric = torch.abs(m.weight.data) * torch.sqrt(scaler.reshape((1, -1)))
    if prune_n:
        mask = nm_mask(metric)
    else:
        mask = torch.zeros_like(metric, dtype=torch.bool)
        order = torch.sort(metric, dim=-1, stable=True)[1]
        mask.scatter_(1, order[:, :int(metric.shape[1] * a.sparsity)], True)
    m.weight.data[mask] = 0


def ria_prune(m, scaler, exponent=0.5):
    """biomedical-cybernetics/Relative-importance-and-activation-pruning `prune_ria` (defaults:
    `--a 0.5`, no `--per_outneuron`, no reallocation): relative importance times the activation
    norm to the power a, one threshold per matrix (`<=`), or N:M per row."""
    W = m.weight.data
    A = torch.abs(W)
    metric = (A / torch.sum(A, dim=0) + A / torch.sum(A, dim=1).reshape(-1, 1)) \
        * torch.sqrt(scaler.reshape((1, -1))) ** exponent
    if prune_n and a.ria_reallocation:
        # Columns sorted by summed score, cut into prune_m chunks, dealt into the groups with
        # every other chunk reversed; the mask is found on the permuted columns, mapped back.
        cols = metric.shape[1]
        order = torch.sort(torch.sum(metric, dim=0))[1]
        index = torch.zeros_like(order)
        for c in range(prune_m):
            chunk = order[int(cols * c / prune_m):int(cols * (c + 1) / prune_m)]
            index[c::prune_m] = chunk if c % 2 == 0 else chunk.flip(0)
        mask = torch.zeros_like(metric, dtype=torch.bool)
        mask[:, index] = nm_mask(metric[:, index])
    elif prune_n:
        mask = nm_mask(metric)
    else:
        thresh = torch.sort(metric.flatten())[0][int(W.shape[0] * W.shape[1] * a.sparsity)]
        mask = metric <= thresh
    W[mask] = 0


def magnitude_prune(m):
    """locuslab/wanda `prune_magnitude`: one threshold per matrix (`<=`), or N:M per row."""
    W = m.weight.data
    metric = torch.abs(W)
    if prune_n:
        mask = nm_mask(metric)
    else:
        thresh = torch.sort(metric.flatten())[0][int(W.numel() * a.sparsity)]
        mask = metric <= thresh
    W[mask] = 0


def sparsegpt_prune(m, H, blocksize=128, percdamp=0.01):
    """SparseGPT's `fasterprune` (IST-DASLab/sparsegpt f5c2500, as locuslab/wanda vendors it)."""
    W = m.weight.data.clone().to(STAT_DT)
    rows, cols = W.shape
    H = H.clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    damp = percdamp * torch.mean(torch.diag(H))
    diag = torch.arange(cols)
    H[diag, diag] += damp
    H = torch.linalg.cholesky(H)
    H = torch.cholesky_inverse(H)
    Hinv = torch.linalg.cholesky(H, upper=True)
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        W1 = W[:, i1:i2].clone()
        Q1 = torch.zeros_like(W1)
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        if prune_n == 0:
            tmp = W1 ** 2 / (torch.diag(Hinv1).reshape((1, -1))) ** 2
            thresh = torch.sort(tmp.flatten())[0][int(tmp.numel() * a.sparsity)]
            mask1 = tmp <= thresh
        else:
            mask1 = torch.zeros_like(W1) == 1
        for i in range(i2 - i1):
            w = W1[:, i]
            d = Hinv1[i, i]
            if prune_n != 0 and i % prune_m == 0:
                tmp = W1[:, i:i + prune_m] ** 2 / (torch.diag(Hinv1)[i:i + prune_m].reshape((1, -1))) ** 2
                mask1.scatter_(1, i + torch.topk(tmp, prune_n, dim=1, largest=False)[1], True)
            q = w.clone()
            q[mask1[:, i]] = 0
            Q1[:, i] = q
            err1 = (w - q) / d
            W1[:, i:] -= err1.unsqueeze(1).matmul(Hinv1[i, i:].unsqueeze(0))
            Err1[:, i] = err1
        W[:, i1:i2] = Q1
        W[:, i2:] -= Err1.matmul(Hinv[i1:i2, i2:])
    m.weight.data = W.reshape(m.weight.shape).to(m.weight.data.dtype)


with torch.no_grad():
    for layer in layers:
        subset = {n: layer.get_submodule(n) for n in LINEARS}
        if a.method == "magnitude":
            for m in subset.values():
                magnitude_prune(m)
            for j in range(a.nsamples):
                outs[j] = run_layer(layer, inps[j])
            inps, outs = outs, inps
            continue
        stats = {n: (torch.zeros(m.weight.shape[1], dtype=STAT_DT) if a.method in ("wanda", "ria")
                     else torch.zeros(m.weight.shape[1], m.weight.shape[1], dtype=STAT_DT))
                 for n, m in subset.items()}
        seen = {n: 0 for n in subset}

        def hook(n):
            def add_batch(_module, inputs, _output):
                x = inputs[0].reshape(-1, inputs[0].shape[-1]).t().to(STAT_DT)
                stats[n] *= seen[n] / (seen[n] + 1)
                seen[n] += 1
                if a.method in ("wanda", "ria"):
                    stats[n] += torch.norm(x, p=2, dim=1) ** 2 / seen[n]
                else:
                    x = math.sqrt(2 / seen[n]) * x
                    stats[n] += x.matmul(x.t())
            return add_batch

        handles = [subset[n].register_forward_hook(hook(n)) for n in subset]
        for j in range(a.nsamples):
            outs[j] = run_layer(layer, inps[j])
        for h in handles:
            h.remove()
        for n, m in subset.items():
            if a.method == "wanda":
                wanda_prune(m, stats[n])
            elif a.method == "ria":
                ria_prune(m, stats[n])
            else:
                sparsegpt_prune(m, stats[n])
        for j in range(a.nsamples):
            outs[j] = run_layer(layer, inps[j])
        inps, outs = outs, inps
prune_s = time.time() - t0

zeros = total = 0
for layer in layers:
    for n in LINEARS:
        w = layer.get_submodule(n).weight.data
        zeros += int((w == 0).sum())
        total += w.numel()

if a.save_pruned:
    from safetensors.torch import save_file
    save_file({f"model.layers.{i}.{n}.weight": layer.get_submodule(n).weight.data.float().contiguous()
               for i, layer in enumerate(layers) for n in LINEARS}, a.save_pruned)

# Evaluate.
t0 = time.time()
ids = tok(open(a.eval_text, encoding="utf-8").read(), return_tensors="pt").input_ids
n = min(ids.shape[1] // a.seqlen, a.windows)
nll = 0.0
with torch.no_grad():
    for i in range(n):
        w = ids[:, i * a.seqlen:(i + 1) * a.seqlen]
        logits = model(w).logits
        nll += torch.nn.functional.cross_entropy(
            logits[0, :-1].float(), w[0, 1:], reduction="sum").item()
eval_s = time.time() - t0
mean = nll / (n * (a.seqlen - 1))
print(json.dumps({
    "implementation": "pytorch", "method": a.method, "pattern": a.pattern,
    "sparsity_ratio": a.sparsity, "torch": torch.__version__, "threads": torch.get_num_threads(),
    "perplexity": float(torch.exp(torch.tensor(mean, dtype=torch.float64))), "mean_nll": mean,
    "windows": n, "seqlen": a.seqlen, "sparsity": zeros / total,
    "calibration_offsets": offsets,
    "load_seconds": load_s, "prune_seconds": prune_s, "eval_seconds": eval_s,
    "wall_seconds": time.time() - T_START,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
}))
