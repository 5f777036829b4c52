#!/usr/bin/env python3
"""The PyTorch reference for wanda's expert pruning (REAP and its baselines), to measure wanda
against; CI never runs it.

REAP is Lasby et al. 2026, github.com/CerebrasResearch/reap: `src/reap/pruning_metrics.py`
(`update_pruning_state`), `observer.py` (the hooks), `metrics.py` (`OnlineStatsTracker`),
`prune.py` (`prune`). This script does what they do on a transformers 5 model, per MoE layer:

a) calibration windows as wanda draws them from a text file (src/data/calibration.rs `draw`, the
   Wanda reference's `get_wikitext2`): the whole file tokenised by the folder's tokenizer.json
   with the `tokenizers` library (`encode(text).ids`, the tokenizer's own special-token setting,
   no splitting by lines), `random.seed(seed)`, per sample
   `i = random.randint(0, len(ids) - seqlen - 1)`, window `ids[i:i + seqlen]`; each window is
   one forward pass (batch 1) and one "batch" of the statistics below;
b) a forward hook on each MoE block's router (`block.gate`), whose input is the block's
   flattened hidden states and whose output is the family's own `(router_logits, top-k weights,
   top-k indices)`. The chosen experts and their weights are the family's routing:
   Mixtral/Qwen3-MoE/OLMoE/Qwen2-MoE: softmax of the logits in f32, top-k, renormalised over the
   top-k where the config's `norm_topk_prob` is true (Mixtral always) -- recomputed here and
   checked against the router's output; DeepSeek-V2/V3 (grouped routers): the router module's
   own top-k indices and weights (groups, correction bias, sigmoid for V3, and
   `routed_scaling_factor` x2.5 included in the weights). Each chosen expert's UNWEIGHTED
   output f_j(x) = down_j(act(gate_j(x)) * up_j(x)) is recomputed from the fused 3-D
   `gate_up_proj` / `down_proj` on its routed tokens. Then, line by line as
   `update_pruning_state`: `expert_frequency` (+= bincount of the chosen experts),
   `ean_sum` (f64 += f32 sum of ||f_j(x)||_2), `ean_mean` (OnlineStatsTracker of the batch's f32
   mean of ||f_j(x)||, weighted by the batch's counts), `weighted_expert_frequency_sum` (f64 +=
   sum of routing weights), `weighted_ean_sum` (f64 += sum of w * ||f_j||), `reap`
   (OnlineStatsTracker of the batch's mean of w * ||f_j||). The four saliencies: `frequency` =
   expert_frequency, `ean` = ean_mean, `weighted_frequency` = weighted_expert_frequency_sum,
   `reap` = reap. (Mathematically `reap` = weighted_ean_sum / expert_frequency and `ean` =
   ean_sum / expert_frequency: how the tokens are cut into batches moves them by rounding only.)
c) removed experts per layer: the n lowest saliencies (`torch.topk(s, n, largest=False)`), n =
   int(E * F) for `--experts F` < 1, else F itself; a grouped router (config `n_group` > 1)
   loses n / n_group from each group (an error unless n % n_group == 0; also an error where
   DeepSeek-V3's router would be left fewer than 2 experts a group). Ties are reported;
d) with `--wanda-experts` (wanda's wanda_experts.json): per layer and per saliency in the file,
   the max relative difference |wanda - ref| / max(|ref|, tiny), whether the kept sets agree,
   and the gap between the smallest kept and the largest removed saliency relative to the
   layer's largest |saliency| (a tie-decided choice shows as a gap near 0);
e) the model pruned the reference way (`prune`: keep the retained experts, slice the router's
   weight rows, its bias and `e_score_correction_bias` if any, rewrite the config's expert
   count), here on transformers 5's fused expert stacks (every expert parameter/buffer indexed
   by expert on dim 0) and the modules' `num_experts`; the kept experts are wanda's when
   `--wanda-experts` is given (so both perplexities are on the same experts), else this
   script's;
f) perplexity by wanda's protocol (src/eval/perplexity.rs, scripts/transformers-ppl.py): the
   eval text tokenised whole, non-overlapping windows of `--eval-seqlen` (the remainder
   dropped, at most `--windows`), mean NLL over all predicted tokens (windows x (seqlen - 1)),
   exp; dense and pruned, and compared with `--wanda-run`'s (the first number under a key
   `perplexity` anywhere in that JSON);
g) with `--wanda-folder`: that folder loaded as is by AutoModelForCausalLM, its expert count as
   transformers reads it, and max |logits difference| against this script's pruned model on the
   first eval window. `--save DIR` saves this script's pruned model (save_pretrained + the
   tokenizer.json), reloads it and checks the logits.

Where the REAP reference code itself differs (`--routing reference` reproduces it): it takes
`topk(router_logits)` and `softmax(router_logits)` for every family (also DeepSeek-V3's sigmoid
router and the grouped routers: no groups, no correction bias, no routed_scaling_factor) and
renormalises the weights over the chosen top-k only where `config.norm_topk_prob` exists and is
true (so never for Mixtral, whose router renormalises; OLMoE and Qwen2-MoE do not), clamping the
renormalised weights at f32 eps. wanda and this script's default (`--routing family`) use each
family's own routing and renormalisation. The reference's `prune` also knows no groups (it
takes the n lowest of the whole layer).

    ~/.cache/wanda-ab-venv/bin/python scripts/reap-reference.py \
        --model tests/fixtures/models/tiny-qwen3_moe \
        --calib-text tests/fixtures/data/fixture-words/calib.txt --nsamples 8 --seqlen 64 --seed 0 \
        --eval-text tests/fixtures/data/fixture-words/eval.txt --eval-seqlen 64 \
        --method reap --experts 0.25 \
        [--wanda-experts OUT/wanda_experts.json --wanda-run OUT/run.json --wanda-folder OUT/pruned] \
        [--save /tmp/reap-pruned] [--json reap.json]
"""
import argparse
import json
import math
import os
import random
import shutil
import sys
import time

import torch
import torch.nn.functional as F
import transformers
from tokenizers import Tokenizer

METHODS = ("reap", "frequency", "ean", "weighted_frequency")
COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
TINY = 1e-30

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--model", required=True, help="a Hugging Face folder (config, safetensors, tokenizer.json)")
p.add_argument("--calib-text", required=True)
p.add_argument("--nsamples", type=int, default=128)
p.add_argument("--seqlen", type=int, default=2048)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--eval-text", required=True)
p.add_argument("--eval-seqlen", type=int, default=2048)
p.add_argument("--windows", type=int, help="at most this many eval windows")
p.add_argument("--method", choices=METHODS, default="reap")
p.add_argument("--experts", type=float, required=True,
               help="experts removed per layer: a fraction F < 1 (n = int(E * F)) or a count")
p.add_argument("--routing", choices=["family", "reference"], default="family",
               help="family: each family's own routing (wanda's); reference: the REAP code's "
                    "topk/softmax of the logits for every family")
p.add_argument("--wanda-experts", help="wanda's wanda_experts.json")
p.add_argument("--wanda-run", help="wanda's run.json (its perplexity)")
p.add_argument("--wanda-folder", help="wanda's saved pruned folder")
p.add_argument("--save", help="save this script's pruned model here and check it reloads")
p.add_argument("--threads", type=int, default=os.cpu_count())
p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
               help="float64: the model and the metric code in f64 (REAP computes in f32), to see "
                    "how far f32 itself lies from the exact saliencies")
p.add_argument("--json", help="write every number here")
a = p.parse_args()
FT = torch.float64 if a.dtype == "float64" else torch.float32
torch.set_num_threads(a.threads)
transformers.utils.logging.disable_progress_bar()
T0 = time.time()
report = {"model": a.model, "method": a.method, "routing": a.routing,
          "transformers": transformers.__version__, "torch": torch.__version__}


def load(folder):
    # PyTorch's grouped expert products take no f64: f64 runs transformers' eager experts.
    extra = {"experts_implementation": "eager"} if FT == torch.float64 else {}
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=FT, **extra).eval()


def tokenize(folder, path):
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    with open(path, encoding="utf-8") as f:
        return tok.encode(f.read()).ids


def fnv1a_hex(offsets):
    """wanda's `offsets_hash` (src/data/calibration.rs)."""
    h = 0xCBF29CE484222325
    for o in offsets:
        for b in int(o).to_bytes(8, "little"):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


class OnlineStatsTracker:
    """REAP's `metrics.OnlineStatsTracker` (Welford's count-weighted mean, Kahan-compensated)."""

    def __init__(self, shape, count_shape=1, dtype=None):
        dtype = dtype or FT
        self.count = torch.zeros(count_shape, dtype=torch.long)
        self.mean = torch.zeros(shape, dtype=dtype)
        self.mean_compensation = torch.zeros(shape, dtype=dtype)
        self.dtype = dtype

    def update(self, new_mean, new_count):
        new_count = new_count.to("cpu", torch.long)
        new_mean = new_mean.to("cpu", dtype=self.dtype)
        updated_count = self.count + new_count
        delta = new_mean - self.mean
        y = delta * new_count / updated_count
        y = y.nan_to_num(0)
        y = y - self.mean_compensation
        t = self.mean + y
        self.mean_compensation = (t - self.mean) - y
        self.mean = t
        self.count = updated_count


def initialize_pruning_state(num_experts):
    return {
        "total_tokens": torch.tensor(0, dtype=torch.long),
        "expert_frequency": torch.zeros(num_experts, dtype=torch.long),
        "ean_sum": torch.zeros(num_experts, dtype=torch.float64),
        "weighted_ean_sum": torch.zeros(num_experts, dtype=torch.float64),
        "ean_mean": OnlineStatsTracker((num_experts,), (num_experts,)),
        "reap": OnlineStatsTracker((num_experts,), (num_experts,)),
        "weighted_expert_frequency_sum": torch.zeros(num_experts, dtype=torch.float64),
        "max_activations": torch.zeros(num_experts, dtype=FT),
    }


def expert_output(experts, j, x):
    """Expert j's unweighted output on rows x, from transformers 5's fused stacks (gate rows
    first in `gate_up_proj`, as the Experts modules' own forward chunks them)."""
    gate, up = F.linear(x, experts.gate_up_proj[j]).chunk(2, dim=-1)
    return F.linear(experts.act_fn(gate) * up, experts.down_proj[j])


def update_pruning_state(state, experts, x, selected, routing_weights, num_experts):
    """`update_pruning_state` of one batch: x [T, hidden], selected [T, k], routing_weights
    [T, E] (the weight of expert i for token t where i is chosen)."""
    num_tokens = selected.shape[0]
    expert_frequency = torch.bincount(selected.reshape(-1), minlength=num_experts)
    state["total_tokens"] += num_tokens
    state["expert_frequency"] += expert_frequency.to(torch.long)
    ean_sum = torch.zeros(num_experts, dtype=torch.float64)
    ean_mean = torch.zeros(num_experts, dtype=FT)
    weighted_ean_sum = torch.zeros(num_experts, dtype=torch.float64)
    reap = torch.zeros(num_experts, dtype=FT)
    weighted_expert_frequency_sum = torch.zeros(num_experts, dtype=torch.float64)
    for i in range(num_experts):
        active_mask = (selected == i).any(dim=-1)
        if not active_mask.any():
            continue
        selected_activations = expert_output(experts, i, x[active_mask])
        active_router_weights = routing_weights[active_mask, i]
        ean_norm = torch.linalg.norm(selected_activations, dim=-1)
        ean_sum[i] = ean_norm.sum()
        ean_mean[i] = ean_norm.mean()
        weighted_expert_frequency_sum[i] = active_router_weights.sum()
        weighted_ean_sum[i] = (ean_norm * active_router_weights).sum()
        reap[i] = (ean_norm * active_router_weights).mean()
        m = selected_activations.max()
        if m > state["max_activations"][i]:
            state["max_activations"][i] = m
    state["ean_sum"] += ean_sum
    state["ean_mean"].update(ean_mean, expert_frequency)
    state["weighted_ean_sum"] += weighted_ean_sum
    state["reap"].update(reap, expert_frequency)
    state["weighted_expert_frequency_sum"] += weighted_expert_frequency_sum


def moe_blocks(model):
    """(decoder layer index, MoE block) for every layer with routed experts: a block with a
    router `gate` and fused `experts` (transformers 5)."""
    out = []
    for i, layer in enumerate(model.model.layers):
        for name in ("mlp", "block_sparse_moe"):
            block = getattr(layer, name, None)
            if block is not None and hasattr(block, "gate") and hasattr(getattr(block, "experts", None), "gate_up_proj"):
                out.append((i, block))
                break
    return out


def config_count_keys(folder):
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    cfg = raw.get("text_config", raw)
    return {k: cfg[k] for k in COUNT_KEYS if k in cfg}


model = load(a.model)
config = model.config
model_type = config.model_type
grouped = (getattr(config, "n_group", None) or 1) > 1
blocks = moe_blocks(model)
if not blocks:
    sys.exit(f"{a.model}: no MoE blocks found")
top_k = config.num_experts_per_tok
E = blocks[0][1].experts.gate_up_proj.shape[0]
if any(b.experts.gate_up_proj.shape[0] != E for _, b in blocks):
    sys.exit("MoE layers with different expert counts")
n_group = config.n_group if grouped else 1
n_remove = int(E * a.experts) if a.experts < 1 else int(a.experts)
if not 0 < n_remove < E:
    sys.exit(f"--experts {a.experts}: {n_remove} of {E} experts removed; need 0 < n < {E}")
if n_remove % n_group:
    sys.exit(f"a grouped router (n_group {n_group}) loses the same count from every group: "
             f"{n_remove} is no multiple of {n_group}")
per_group_left = (E - n_remove) // n_group
if model_type == "deepseek_v3" and grouped and per_group_left < 2:
    sys.exit(f"DeepSeek-V3's router takes the top 2 of each group: {per_group_left} expert(s) "
             f"a group would be left")
if E - n_remove < top_k:
    sys.exit(f"{E - n_remove} experts left, fewer than top-k {top_k}")
print(f"# {a.model}: {model_type}, {len(blocks)} MoE layers of {E} experts (top-{top_k}"
      f"{f', {n_group} groups' if grouped else ''}), removing {n_remove} a layer by {a.method}; "
      f"count keys {config_count_keys(a.model)}")
report.update(model_type=model_type, experts=E, top_k=top_k, n_group=n_group,
              removed_per_layer=n_remove, count_keys=config_count_keys(a.model))

# a) calibration windows.
ids = tokenize(a.model, a.calib_text)
if len(ids) < a.seqlen + 2:
    sys.exit(f"calibration text: {len(ids)} tokens, need {a.seqlen + 2}")
random.seed(a.seed)
offsets = [random.randint(0, len(ids) - a.seqlen - 1) for _ in range(a.nsamples)]
windows = [ids[i:i + a.seqlen] for i in offsets]
unk = sum(w.count(0) for w in windows)
print(f"calibration: {len(ids)} tokens, offsets {offsets[:8]}{' ...' if len(offsets) > 8 else ''} "
      f"(hash {fnv1a_hex(offsets)}), [UNK]/id-0 tokens in the windows: {unk}")
report.update(calib_tokens=len(ids), offsets=offsets, offsets_hash=fnv1a_hex(offsets))

# b) statistics.
states = {i: initialize_pruning_state(E) for i, _ in blocks}
norm_topk = getattr(config, "norm_topk_prob", None)
family_renorm = True if model_type == "mixtral" else bool(norm_topk)
checks = {"max_weight_diff_vs_router": 0.0, "index_mismatches": 0}


def hook_for(layer, block):
    def hook(gate, args, output):
        x = args[0].reshape(-1, args[0].shape[-1]).to(FT)
        logits, top_w, top_i = output
        logits = logits.to(FT)
        if a.routing == "reference":
            selected = torch.topk(logits, top_k, dim=-1).indices
            weights = F.softmax(logits, dim=1, dtype=FT)
            if norm_topk:
                weights = weights / torch.gather(weights, 1, selected).sum(dim=-1, keepdim=True)
                weights = torch.clamp(weights, min=torch.finfo(weights.dtype).eps)
        else:
            if grouped:
                selected, chosen_w = top_i, top_w.to(FT)
            else:
                probs = F.softmax(logits, dim=-1, dtype=FT)
                chosen_w, selected = torch.topk(probs, top_k, dim=-1)
                if family_renorm:
                    chosen_w = chosen_w / chosen_w.sum(dim=-1, keepdim=True)
                checks["index_mismatches"] += int((selected != top_i).any(dim=-1).sum())
                checks["max_weight_diff_vs_router"] = max(
                    checks["max_weight_diff_vs_router"], float((chosen_w - top_w.to(FT)).abs().max()))
            weights = torch.zeros(x.shape[0], E, dtype=FT).scatter(1, selected, chosen_w)
        update_pruning_state(states[layer], block.experts, x, selected, weights, E)
    return hook


handles = [block.gate.register_forward_hook(hook_for(i, block)) for i, block in blocks]
t0 = time.time()
with torch.no_grad():
    for w in windows:
        model(torch.tensor([w]))
for h in handles:
    h.remove()
report["calibration_seconds"] = time.time() - t0
if a.routing == "family" and not grouped:
    print(f"own routing vs the router module: {checks['index_mismatches']} token(s) with other "
          f"experts, max weight difference {checks['max_weight_diff_vs_router']:.3g}")
report["routing_checks"] = checks


def saliencies(state):
    return {"reap": state["reap"].mean.clone(),
            "frequency": state["expert_frequency"].clone(),
            "ean": state["ean_mean"].mean.clone(),
            "weighted_frequency": state["weighted_expert_frequency_sum"].clone()}


def choose(s, n):
    """Removed experts: the n lowest of s (per group: n / n_group lowest), sorted; and whether a
    tie decided it, and the gap min(kept) - max(removed) relative to max |s| (min over groups)."""
    s = s.double() if not s.is_floating_point() else s
    size, per = E // n_group, n // n_group
    removed, tie, gap = [], False, math.inf
    scale = max(float(s.abs().max()), TINY)
    for g in range(n_group):
        part = s[g * size:(g + 1) * size]
        idx = torch.topk(part, per, largest=False).indices
        removed += [g * size + int(j) for j in idx]
        kept = [j for j in range(size) if j not in set(idx.tolist())]
        hi, lo = float(part[idx].max()), float(part[kept].min())
        tie = tie or hi == lo
        gap = min(gap, (lo - hi) / scale)
    return sorted(removed), tie, gap


def rel_diff(ours, theirs):
    ours = torch.as_tensor(ours, dtype=torch.float64)
    theirs = torch.as_tensor(theirs, dtype=torch.float64)
    return float(((theirs - ours).abs() / ours.abs().clamp(min=TINY)).max())


# c), d)
wanda = None
if a.wanda_experts:
    with open(a.wanda_experts) as f:
        wanda = json.load(f)
    wanda_layers = {int(l["layer"]): l for l in wanda.get("layers", [])}
    wanda_method = wanda.get("method", a.method)
    if wanda_method != a.method:
        print(f"note: wanda's method is {wanda_method}, this run's {a.method}")
    if "removed_per_layer" in wanda and int(wanda["removed_per_layer"]) != n_remove:
        print(f"note: wanda removed {wanda['removed_per_layer']} a layer, this run {n_remove}")

rows, kept_for_prune = [], {}
head = ("| layer | tokens | removed | gap | tie | spread " + " ".join(f"| {m}" for m in METHODS)
        + (" | wanda removed | kept equal | wanda self | max rel diff" if wanda else "") + " |")
print()
print(head)
print("|" + "---|" * (head.count("|") - 1))
for i, _ in blocks:
    state = states[i]
    sal = saliencies(state)
    removed, tie, gap = choose(sal[a.method], n_remove)
    kept = [j for j in range(E) if j not in removed]
    s = sal[a.method].double()
    spread = float((s.max() - s.min()) / max(float(s.abs().max()), TINY))
    row = {"layer": i, "experts": E, "tokens": int(state["total_tokens"]), "removed": removed,
           "kept": kept, "tie": tie, "gap": gap, "spread": spread,
           "saliency": {m: sal[m].double().tolist() for m in METHODS},
           "ean_sum": state["ean_sum"].tolist(), "weighted_ean_sum": state["weighted_ean_sum"].tolist(),
           "max_activations": state["max_activations"].tolist()}
    kept_for_prune[i] = kept
    cells = [str(i), str(row["tokens"]), str(removed), f"{gap:.3g}", "TIE" if tie else "-",
             f"{spread:.3g}"] + [" ".join(f"{v:.4g}" for v in sal[m].double().tolist()) for m in METHODS]
    if wanda:
        wl = wanda_layers.get(i)
        if wl is None:
            cells += ["(missing)", "-", "-", "-"]
            row["wanda"] = None
        else:
            w_kept = sorted(int(j) for j in wl.get("kept", []))
            w_removed = sorted(int(j) for j in wl.get("removed", [j for j in range(E) if j not in w_kept]))
            if not w_kept:
                w_kept = [j for j in range(E) if j not in w_removed]
            diffs = {m: rel_diff(sal[m], v) for m, v in wl.get("saliency", {}).items() if m in sal}
            self_removed = None
            if wanda_method in wl.get("saliency", {}):
                self_removed, _, _ = choose(torch.tensor(wl["saliency"][wanda_method], dtype=torch.float64), n_remove)
            row["wanda"] = {"kept": w_kept, "removed": w_removed, "kept_equal": w_kept == kept,
                            "self_consistent": self_removed == w_removed if self_removed is not None else None,
                            "max_rel_diff": diffs, "tokens": wl.get("tokens"), "experts": wl.get("experts")}
            kept_for_prune[i] = w_kept
            cells += [str(w_removed), "yes" if w_kept == kept else "NO",
                      "-" if self_removed is None else ("yes" if self_removed == w_removed else "NO"),
                      " ".join(f"{m}={d:.2g}" for m, d in diffs.items())]
    print("| " + " | ".join(cells) + " |")
    rows.append(row)
report["layers"] = rows


# f) perplexity.
eval_ids = tokenize(a.model, a.eval_text)
n_windows = len(eval_ids) // a.eval_seqlen
if a.windows:
    n_windows = min(n_windows, a.windows)
if n_windows < 1:
    sys.exit(f"eval text: {len(eval_ids)} tokens, fewer than one window of {a.eval_seqlen}")
first_window = torch.tensor([eval_ids[:a.eval_seqlen]])


def perplexity(m):
    nll = 0.0
    with torch.no_grad():
        for w in range(n_windows):
            x = torch.tensor([eval_ids[w * a.eval_seqlen:(w + 1) * a.eval_seqlen]])
            logits = m(x).logits[0].float()
            nll += F.cross_entropy(logits[:-1], x[0, 1:], reduction="sum").item()
    mean = nll / (n_windows * (a.eval_seqlen - 1))
    return math.exp(mean), mean


dense_ppl, _ = perplexity(model)

# e) prune the reference way, on the fused stacks.
with torch.no_grad():
    for i, block in blocks:
        kept = kept_for_prune[i]
        idx = torch.tensor(kept)
        for mod in (block.experts, block.gate):
            for name, t in list(mod.named_parameters(recurse=False)) + list(mod.named_buffers(recurse=False)):
                if t.dim() >= 1 and t.shape[0] == E:
                    sliced = t.data[idx].clone()
                    if isinstance(t, torch.nn.Parameter):
                        setattr(mod, name, torch.nn.Parameter(sliced, requires_grad=False))
                    else:
                        setattr(mod, name, sliced)
        for mod in (block, block.experts, block.gate):
            for attr in COUNT_KEYS + ("experts_per_rank",):
                if isinstance(getattr(mod, attr, None), int) and getattr(mod, attr) == E:
                    setattr(mod, attr, len(kept))
        if hasattr(block.gate, "out_features"):
            block.gate.out_features = len(kept)
left = E - n_remove
for key in config_count_keys(a.model):
    setattr(config, key, left)
pruned_ppl, pruned_nll = perplexity(model)
print()
print(f"perplexity ({n_windows} windows of {a.eval_seqlen}): dense {dense_ppl:.6g}, pruned "
      f"{pruned_ppl:.6g} (kept experts: {'wanda' if wanda else 'this script'}'s)")
report.update(eval_tokens=len(eval_ids), eval_windows=n_windows, eval_seqlen=a.eval_seqlen,
              dense_perplexity=dense_ppl, pruned_perplexity=pruned_ppl, pruned_mean_nll=pruned_nll,
              kept_from="wanda" if wanda else "script",
              pruned_config_count={k: getattr(config, k) for k in config_count_keys(a.model)})
if not math.isfinite(pruned_ppl):
    print("ERROR: the pruned perplexity is not finite")

with torch.no_grad():
    pruned_logits = model(first_window).logits[0].float()


def find_numbers(obj, key, path="$"):
    if isinstance(obj, dict):
        for k, v in obj.items():
            sub = f"{path}.{k}"
            if k == key and isinstance(v, (int, float)) and not isinstance(v, bool):
                yield sub, float(v)
            yield from find_numbers(v, key, sub)
    elif isinstance(obj, list):
        for j, v in enumerate(obj):
            yield from find_numbers(v, key, f"{path}[{j}]")


if a.wanda_run:
    with open(a.wanda_run) as f:
        found = list(find_numbers(json.load(f), "perplexity"))
    if not found:
        print(f"{a.wanda_run}: no numeric `perplexity` key")
    else:
        for path, v in found:
            print(f"{a.wanda_run}: {path} = {v:.6g}")
        wp = found[0][1]
        rd = abs(wp - pruned_ppl) / pruned_ppl
        print(f"wanda perplexity {wp:.6g} ({found[0][0]}) vs reference {pruned_ppl:.6g}: "
              f"relative difference {rd:.3g}")
        report.update(wanda_perplexity=wp, wanda_perplexity_path=found[0][0],
                      perplexity_rel_diff=rd, wanda_perplexities_found=dict(found))

# g) wanda's saved folder.
if a.wanda_folder:
    wm = load(a.wanda_folder)
    keys = config_count_keys(a.wanda_folder)
    wblocks = moe_blocks(wm)
    stacks = sorted({b.experts.gate_up_proj.shape[0] for _, b in wblocks})
    read = {k: getattr(wm.config, k) for k in COUNT_KEYS if getattr(wm.config, k, None) is not None}
    print(f"{a.wanda_folder}: config.json count keys {keys}, transformers reads {read}, expert "
          f"stacks of {stacks} (this script's: {E - n_remove})")
    with torch.no_grad():
        wl = wm(first_window).logits[0].float()
    d = float((wl - pruned_logits).abs().max())
    print(f"{a.wanda_folder}: max |logits - reference pruned logits| on the first eval window {d:.3g}")
    report["wanda_folder"] = {"count_keys": keys, "transformers_reads": read, "expert_stacks": stacks,
                              "max_abs_logit_diff": d}

if a.save:
    model.save_pretrained(a.save)
    shutil.copy(os.path.join(a.model, "tokenizer.json"), os.path.join(a.save, "tokenizer.json"))
    back = load(a.save)
    with torch.no_grad():
        d = float((back(first_window).logits[0].float() - pruned_logits).abs().max())
    from safetensors import safe_open
    with safe_open(os.path.join(a.save, "model.safetensors"), "pt") as f:
        names = sorted(k for k in f.keys() if f".{blocks[0][0]}." in k and "expert" in k)
    print(f"saved to {a.save} (count keys {config_count_keys(a.save)}); reloaded: max |logits "
          f"difference| {d:.3g}; layer {blocks[0][0]}'s expert tensors: {names[:4]}"
          f"{' ...' if len(names) > 4 else ''} ({len(names)})")
    report["saved"] = {"folder": a.save, "count_keys": config_count_keys(a.save),
                       "reload_max_abs_logit_diff": d, "expert_tensor_names": names}

summary = {"dense_perplexity": dense_ppl, "pruned_perplexity": pruned_ppl,
           "min_gap": min(r["gap"] for r in rows), "ties": sum(r["tie"] for r in rows),
           "min_spread": min(r["spread"] for r in rows)}
if wanda:
    compared = [r["wanda"] for r in rows if r.get("wanda")]
    summary.update(
        layers_compared=len(compared), layers_missing=len(rows) - len(compared),
        kept_equal=sum(w["kept_equal"] for w in compared),
        max_rel_diff={m: max((w["max_rel_diff"][m] for w in compared if m in w["max_rel_diff"]), default=None)
                      for m in METHODS})
for k in ("perplexity_rel_diff",):
    if k in report:
        summary[k] = report[k]
if "wanda_folder" in report:
    summary["wanda_folder_max_abs_logit_diff"] = report["wanda_folder"]["max_abs_logit_diff"]
if "saved" in report:
    summary["saved_reload_max_abs_logit_diff"] = report["saved"]["reload_max_abs_logit_diff"]
print()
print("summary: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()))
report["summary"] = summary
report["seconds"] = time.time() - T0
if a.json:
    with open(a.json, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {a.json}")
