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

Two layer-wise refinements can be put on top of wanda, magnitude or sparsegpt:

- `--owl` (luuyin/OWL dddb7a4, `lib/prune_all.py: prune_wanda_outlier, prune_mag_outlier,
  prune_sparsegpt_outlier`; unstructured only): a first pass over the DENSE model on the same
  calibration samples pools the Wanda scores `|W| · sqrt(scaler_row)` of a layer's seven linears and
  takes its outlier ratio `100 · count(score > M · mean) / numel` (`--owl-m`, default 5 as the paper
  and README; the reference's argparse default is 3), propagating dense outputs. The ratios are
  min-max scaled to [0, 2λ] (`--owl-lambda`, default 0.08) in numpy float64, shifted so the mean
  density is 1 − sparsity; layer sparsity = 1 − density (`<= 0` → 0.01 for wanda and sparsegpt, no
  clamp for magnitude, as the reference). The second pass is the method's ordinary sequential
  pruning with each layer's own ratio. Adds `owl`, `owl_outlier_ratios` (percent per layer) and
  `layer_sparsities` (the ratio each layer was pruned at) to the JSON.
- `--dsnot` (zyxxmu/DSnoT 4c029df, `lib/prune.py: prune_DSnoT`; `--method` is its
  `--initial_method`; unstructured or N:M): per linear, besides `scaler_row`, the running mean over
  samples of the per-sample token sum of x and the token-weighted average of per-sample population
  variances; the initial mask (per row, stable sort, for every `--method`, or N:M) is refined by up to
  `--dsnot-cycles` (50) prune-and-grow swaps per output row, driven by the signed reconstruction
  error `Σ_pruned W · sum_x`, until `|err| <= --dsnot-update-threshold` (0.1); regrowing is ordered
  by `W · sum_x / var^p` (`--dsnot-var-power`, 1; 0 turns the division off), pruning by the Wanda
  score split by the contribution's sign (`return_reorder_indice`); N:M swaps inside the regrown
  weight's group and also requires the error to keep its initial sign. `--dsnot-layers attention`
  (default, the reference's `--skip_layer mlp`) refines only q/k/v/o_proj, the MLP linears keep the
  plain initial mask; `all` refines every linear. There is no SparseGPT weight update: sparsegpt
  only gives the initial score `W² / diag(U)²` (U the upper Cholesky factor of the damped H⁻¹).
  The reference never accumulates H at that commit (every score 0); here H is accumulated as for
  `--method sparsegpt`. Adds `dsnot` (the settings) to the JSON.

Prints one JSON object: load, prune and eval seconds, whole wall time, peak RSS, perplexity,
calibration offsets.

    AB_VENV=~/.cache/wanda-ab-venv; python3 -m venv $AB_VENV
    $AB_VENV/bin/pip install torch transformers gguf accelerate
    $AB_VENV/bin/python scripts/torch-wanda-cell.py --gguf ../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --hf-dir ../shared/models/smollm2-135m-hf \
        --calib-text ../shared/data/wikitext-2/wikitext2-v1-valid.txt \
        --eval-text ../shared/data/wikitext-2/wikitext2-raw-test.txt
"""
import argparse, inspect, json, math, os, random, resource, sys, time

import numpy as np

T_START = time.time()

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

p = argparse.ArgumentParser()
src = p.add_mutually_exclusive_group(required=True)
src.add_argument("--gguf", help="a GGUF file (its tokenizer unless --hf-dir)")
src.add_argument("--hf-model", help="a Hugging Face folder (safetensors, config.json, tokenizer)")
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
p.add_argument("--perturb-scaler", type=int, metavar="SEED",
               help="multiply each wanda scaler_row value by 1 + u·2^-23, u uniform in [-1, 1) "
                    "from this seed: rounding-sized noise, to measure how far the reference's "
                    "own perplexity moves under it")
p.add_argument("--dump-scaler", metavar="FILE",
               help="write each linear's scaler_row (wanda, or any method under --dsnot) here "
                    "(safetensors, `<linear>.scaler`), to look at the scores around a mask "
                    "difference")
p.add_argument("--swap", metavar="LINEAR:ROW:PRUNE:KEEP", action="append", default=[],
               help="(repeatable) wanda, or --dsnot's initial mask: in this linear's row, prune "
                    "column PRUNE and keep column KEEP whatever the scores say (e.g. "
                    "model.layers.22.self_attn.q_proj:453:122:239), to see what one near-tie "
                    "decided the other way does to the cell")
p.add_argument("--swap-order", metavar="LINEAR:ROW:A:B", action="append", default=[],
               help="(repeatable) --dsnot, unstructured: exchange kept columns A and B in this "
                    "linear's row's pruning order (a near-tie of their Wanda scores decided the "
                    "other way)")
p.add_argument("--windows", type=int, default=64)
p.add_argument("--threads", type=int, default=os.cpu_count())
p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
               help="compute everything (forward, statistics, pruning) in this precision; float64 "
               "shows what the cell gives without f32 rounding")
p.add_argument("--owl", action="store_true",
               help="OWL layer-wise sparsities (luuyin/OWL *_outlier), unstructured only")
p.add_argument("--owl-m", type=float, default=5.0,
               help="OWL outlier threshold M (× layer mean score); the paper/README value")
p.add_argument("--owl-lambda", type=float, default=0.08, help="OWL λ: layer sparsities span 2λ")
p.add_argument("--dsnot", action="store_true",
               help="DSnoT prune-and-grow on the initial mask (zyxxmu/DSnoT prune_DSnoT)")
p.add_argument("--dsnot-cycles", type=int, default=50, help="DSnoT --max_cycle_time")
p.add_argument("--dsnot-update-threshold", type=float, default=0.1,
               help="DSnoT --update_threshold: a row stops once |err| is not above it")
p.add_argument("--dsnot-var-power", type=float, default=1.0,
               help="DSnoT --pow_of_var_regrowing (0: no division by the variance)")
p.add_argument("--dsnot-layers", choices=["attention", "all"], default="attention",
               help="linears DSnoT refines: attention (the reference's --skip_layer mlp) or all")
p.add_argument("--weight-update", choices=["sequential", "iterative"],
               help="the Wanda paper's ablation (locuslab/wanda prune_ablate, lib/ablate.py): "
                    "--method wanda or magnitude as ablate_{wanda,mag}_{seq,iter}")
a = p.parse_args()
if a.weight_update and (a.method not in ("wanda", "magnitude") or a.owl or a.dsnot):
    p.error("--weight-update takes --method wanda or magnitude, without --owl or --dsnot")
if a.owl and a.pattern != "unstructured":
    p.error("--owl is unstructured only (the reference's N:M ignores the OWL ratios)")
if (a.owl or a.dsnot) and a.method == "ria":
    p.error("--owl and --dsnot take --method wanda, magnitude or sparsegpt")
if a.owl and a.dsnot:
    p.error("--owl and --dsnot do not combine (no reference does)")
DT = getattr(torch, a.dtype)
# The reference accumulates statistics in f32 (`inp.type(torch.float32)`); float64 keeps f64.
STAT_DT = torch.float64 if DT == torch.float64 else torch.float32
torch.set_num_threads(a.threads)
prune_n, prune_m = (0, 0) if a.pattern == "unstructured" else map(int, a.pattern.split(":"))

# Load.
t0 = time.time()
DTYPE_KEY = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
if a.hf_model:
    try:
        model = AutoModelForCausalLM.from_pretrained(a.hf_model, **{DTYPE_KEY: torch.float32})
    except ValueError:
        # A vision-language class that is no causal LM to the auto classes (LLaVA, Qwen-VL).
        model = transformers.AutoModelForImageTextToText.from_pretrained(
            a.hf_model, **{DTYPE_KEY: torch.float32})
    # The folder's tokenizer.json itself, as wanda reads it (AutoTokenizer would pick the
    # family's tokenizer class, which ignores a tokenizer.json of another kind).
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(a.hf_model, "tokenizer.json"))
else:
    folder, name = os.path.split(os.path.abspath(a.gguf))
    extra = {"config": AutoConfig.from_pretrained(a.hf_dir)} if a.hf_dir else {}
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, **{DTYPE_KEY: torch.float32}, **extra)
    tok = AutoTokenizer.from_pretrained(a.hf_dir) if a.hf_dir else AutoTokenizer.from_pretrained(
        folder, gguf_file=name)
model = model.eval().to(DT)
model.config.use_cache = False
if type(model).__name__ == "Llama4ForConditionalGeneration":
    # Llama 4 as released: its language model, a Llama4ForCausalLM, is what the whole model's
    # forward runs on text alone (transformers 5.24's whole-model forward then fails to build its
    # output, `image_outputs` missing).
    model = model.language_model
    model.config.use_cache = False
elif hasattr(model.config, "text_config") and hasattr(model.model, "language_model"):
    # A vision-language model: its language model's layers are pruned, run through the whole
    # model's own forward on text alone.
    model.model.layers = model.model.language_model.layers
    model.config.hidden_size = model.config.text_config.hidden_size
    model.config.text_config.use_cache = False


def linear_experts(stacks, count, hidden, inter, names):
    """transformers 5's 3-D expert stacks (`gate_up_proj` `[experts, 2·inter, hidden]`, gate rows
    first, and `down_proj`) as transformers 4's per-expert nn.Linear modules, named `names`
    (gate, up, down)."""
    gate, up, down = names
    experts = torch.nn.ModuleList()
    for e in range(count):
        expert = torch.nn.Module()
        for name, rows in ((gate, slice(0, inter)), (up, slice(inter, 2 * inter))):
            setattr(expert, name, torch.nn.Linear(hidden, inter, bias=False))
            getattr(expert, name).weight.data = stacks.gate_up_proj.data[e, rows].clone()
        setattr(expert, down, torch.nn.Linear(inter, hidden, bias=False))
        getattr(expert, down).weight.data = stacks.down_proj.data[e].clone()
        experts.append(expert)
    return experts


def routed_experts(experts, act, x, chosen, weights, count, names=("gate_proj", "up_proj", "down_proj")):
    """The routed experts' summed output as transformers computes it: each expert hit run on
    its tokens in (choice, token) order, `down(act(gate(x)) * up(x))` times the token's weight
    for it, added in the model's dtype; so an expert's forward hooks see only its tokens."""
    gate, up, down = names
    out = torch.zeros_like(x)
    mask = torch.nn.functional.one_hot(chosen, num_classes=count).permute(2, 1, 0)
    for e in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero():
        e = int(e[0])
        choice, token = torch.where(mask[e])
        expert, rows = experts[e], x[token]
        y = getattr(expert, down)(act(getattr(expert, gate)(rows)) * getattr(expert, up)(rows))
        out.index_add_(0, token, (y * weights[token, choice, None]).to(x.dtype))
    return out


class ReferenceMoe(torch.nn.Module):
    """A sparse mixture of experts as transformers 4.4x builds it, whose modules the reference's
    find_layers sees: an nn.Linear router `gate` and experts of nn.Linear (Mixtral's `w1`, `w3`,
    `w2`; Qwen3-MoE's and OLMoE's `gate_proj`, `up_proj`, `down_proj`); transformers 5 keeps the
    experts in 3-D parameters no hook reaches. Its forward is that version's: softmax in f32,
    top-k, renormalised (Mixtral; Qwen3-MoE and OLMoE where `norm_topk_prob` says), the weights
    rounded to the model's dtype (Qwen3-MoE, OLMoE), the experts run by `routed_experts`."""

    def __init__(self, block, config):
        super().__init__()
        mixtral = config.model_type == "mixtral"
        hidden = config.hidden_size
        inter = config.intermediate_size if mixtral else getattr(
            config, "moe_intermediate_size", config.intermediate_size)
        self.top_k = config.num_experts_per_tok
        self.count = config.num_local_experts if mixtral else config.num_experts
        self.normalize = mixtral or getattr(config, "norm_topk_prob", True)
        self.round = not mixtral
        self.names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
        self.gate = torch.nn.Linear(hidden, self.count, bias=False)
        self.gate.weight.data = block.gate.weight.data.clone()
        self.experts = linear_experts(block.experts, self.count, hidden, inter, self.names)
        self.act = block.experts.act_fn
        # Qwen2-MoE's shared expert and its gate: nn.Linear modules already.
        self.shared_expert = getattr(block, "shared_expert", None)
        self.shared_expert_gate = getattr(block, "shared_expert_gate", None)

    def forward(self, hidden_states):
        batch, seq, hidden = hidden_states.shape
        x = hidden_states.view(-1, hidden)
        weights = torch.nn.functional.softmax(self.gate(x), dim=1, dtype=torch.float)
        weights, chosen = torch.topk(weights, self.top_k, dim=-1)
        if self.normalize:
            weights /= weights.sum(dim=-1, keepdim=True)
        if self.round:
            weights = weights.to(x.dtype)
        out = routed_experts(self.experts, self.act, x, chosen, weights, self.count, self.names)
        if self.shared_expert is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out.view(batch, seq, hidden)


class ReferenceGptOssMoe(torch.nn.Module):
    """GPT-OSS's mixture of experts (transformers 5.24's `GptOssMLP`) over modules the reference's
    find_layers sees: an nn.Linear router with its bias (`router`) and, per expert, the gate and
    up projections its 3-D `gate_up_proj` interleaves (the even and the odd outputs) and its
    down projection, each an nn.Linear with its bias. As transformers routes: top-k of the router
    logits, their softmax in the model's dtype; each expert hit runs on its tokens in (choice,
    token) order, `(clamp(up, ±limit) + 1) · g · σ(alpha · g)` with `g = min(gate, limit)`.
    Returns the block's output with the routing scores, as the decoder layer unpacks them."""

    def __init__(self, block, config):
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        self.top_k, self.count = config.num_experts_per_tok, config.num_local_experts
        self.alpha, self.limit = config.swiglu_alpha, config.swiglu_limit
        self.router = torch.nn.Linear(hidden, self.count)
        self.router.weight.data = block.router.weight.data.clone()
        self.router.bias.data = block.router.bias.data.clone()
        stacked = block.experts
        self.experts = torch.nn.ModuleList()
        for e in range(self.count):
            expert = torch.nn.Module()
            for name, cols in (("gate_proj", slice(0, None, 2)), ("up_proj", slice(1, None, 2))):
                linear = torch.nn.Linear(hidden, inter)
                linear.weight.data = stacked.gate_up_proj.data[e][:, cols].t().contiguous()
                linear.bias.data = stacked.gate_up_proj_bias.data[e][cols].clone()
                setattr(expert, name, linear)
            expert.down_proj = torch.nn.Linear(inter, hidden)
            expert.down_proj.weight.data = stacked.down_proj.data[e].t().contiguous()
            expert.down_proj.bias.data = stacked.down_proj_bias.data[e].clone()
            self.experts.append(expert)

    def forward(self, hidden_states):
        batch, seq, hidden = hidden_states.shape
        x = hidden_states.reshape(-1, hidden)
        logits = self.router(x)
        top, chosen = torch.topk(logits, self.top_k, dim=-1)
        weights = torch.nn.functional.softmax(top, dim=1, dtype=top.dtype)
        out = torch.zeros_like(x)
        mask = torch.nn.functional.one_hot(chosen, num_classes=self.count).permute(2, 1, 0)
        for e in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero():
            e = int(e[0])
            choice, token = torch.where(mask[e])
            expert, rows = self.experts[e], x[token]
            gate = expert.gate_proj(rows).clamp(max=self.limit)
            up = expert.up_proj(rows).clamp(min=-self.limit, max=self.limit)
            y = expert.down_proj((up + 1) * gate * torch.sigmoid(gate * self.alpha))
            out.index_add_(0, token, (y * weights[token, choice, None]).to(x.dtype))
        return out.view(batch, seq, hidden), weights


class ReferenceGlm4Moe(torch.nn.Module):
    """GLM-4.5's mixture of experts (transformers 5.24's `Glm4MoeMoE`) over modules the
    reference's find_layers sees, as transformers 4.54 held its experts: an nn.Linear router
    `gate` (no bias; its `e_score_correction_bias` kept beside it) and, per expert, nn.Linear
    `gate_proj`, `up_proj` and `down_proj` from the 3-D stacks; the shared expert is an MLP of
    nn.Linear already. As transformers routes: the router in f32, sigmoid scores, the choice by
    score plus correction within the best `topk_group` of `n_group` groups (each scored by its two
    best), the chosen scores renormalised where `norm_topk_prob` says and times
    `routed_scaling_factor`; each expert hit runs on its tokens in (choice, token) order; the
    shared expert's output is added ungated."""

    def __init__(self, block, config):
        super().__init__()
        hidden, inter = config.hidden_size, config.moe_intermediate_size
        router = block.gate
        self.top_k, self.count = router.top_k, router.num_experts
        self.groups, self.open = router.num_group, router.topk_group
        self.normalize, self.scale = router.norm_topk_prob, router.routed_scaling_factor
        self.gate = torch.nn.Linear(hidden, self.count, bias=False)
        self.gate.weight.data = router.weight.data.clone()
        self.register_buffer("correction", router.e_score_correction_bias.data.clone())
        self.experts = linear_experts(block.experts, self.count, hidden, inter,
                                      ("gate_proj", "up_proj", "down_proj"))
        self.act = block.experts.act_fn
        self.shared_experts = block.shared_experts

    def forward(self, hidden_states):
        batch, seq, hidden = hidden_states.shape
        x = hidden_states.view(-1, hidden)
        # Through the module, so that its hooks see the router's input (f32 in f32 runs, as
        # transformers keeps the router).
        weights, chosen = self.route(self.gate(x).float())
        out = routed_experts(self.experts, self.act, x, chosen, weights, self.count)
        return out.view(batch, seq, hidden) + self.shared_experts(hidden_states)

    def route(self, logits):
        """The chosen experts' weights and indices, `[tokens, top_k]` each, from f32 logits."""
        scores = logits.sigmoid()
        choice = scores + self.correction
        group_scores = choice.view(-1, self.groups, self.count // self.groups).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=self.open, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, self.groups, self.count // self.groups).reshape(-1, self.count)
        choice = choice.masked_fill(~score_mask.bool(), float("-inf"))
        chosen = torch.topk(choice, k=self.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, chosen)
        if self.normalize:
            weights /= weights.sum(dim=-1, keepdim=True) + 1e-20
        return weights * self.scale, chosen


class ReferenceDeepseekV2Moe(ReferenceGlm4Moe):
    """DeepSeek-V2's mixture of experts (transformers 5.24's `DeepseekV2Moe`) over the same
    modules as GLM-4.5's, routed as `DeepseekV2TopkRouter` routes: the softmax of the f32
    logits; `greedy` the top-k, `group_limited_greedy` the top-k within the `topk_group` groups
    with the best probability; never renormalised; times `routed_scaling_factor`."""

    def __init__(self, block, config):
        router = block.gate
        router.norm_topk_prob = False
        router.e_score_correction_bias = torch.zeros(router.num_experts)
        super().__init__(block, config)
        self.method = router.topk_method

    def route(self, logits):
        scores = logits.softmax(dim=-1, dtype=torch.float32)
        if self.method == "group_limited_greedy":
            size = self.count // self.groups
            group_scores = scores.view(-1, self.groups, size).max(dim=-1).values
            group_idx = torch.topk(group_scores, k=self.open, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
            score_mask = group_mask.unsqueeze(-1).expand(-1, self.groups, size).reshape(-1, self.count)
            scores = scores.masked_fill(~score_mask.bool(), 0.0)
        weights, chosen = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
        return weights * self.scale, chosen


class ReferenceLlama4Moe(torch.nn.Module):
    """Llama 4's mixture of experts (transformers 5.24's `Llama4TextMoe`) over modules the
    reference's find_layers sees: an nn.Linear router `router` and, per expert, the gate and up
    projections its 3-D `gate_up_proj` (`[experts, hidden, 2·inter]`) holds in halves and its down
    projection, each an nn.Linear; the shared expert is an MLP of nn.Linear already. As
    transformers routes: the top-k router logits, their sigmoid in f32 returned in the model's
    dtype, each scaling its expert's input; each expert hit runs on its tokens in (choice, token)
    order (transformers runs every expert on every token, those not routed to it scaled to zero,
    which add nothing), its outputs added to the shared expert's. Returns the block's output with
    the router logits, as the decoder layer unpacks them."""

    def __init__(self, block, config):
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        self.top_k, self.count = config.num_experts_per_tok, config.num_local_experts
        self.router = torch.nn.Linear(hidden, self.count, bias=False)
        self.router.weight.data = block.router.weight.data.clone()
        stacked = block.experts
        self.act = stacked.act_fn
        self.experts = torch.nn.ModuleList()
        for e in range(self.count):
            expert = torch.nn.Module()
            for name, cols in (("gate_proj", slice(0, inter)), ("up_proj", slice(inter, 2 * inter))):
                linear = torch.nn.Linear(hidden, inter, bias=False)
                linear.weight.data = stacked.gate_up_proj.data[e][:, cols].t().contiguous()
                setattr(expert, name, linear)
            expert.down_proj = torch.nn.Linear(inter, hidden, bias=False)
            expert.down_proj.weight.data = stacked.down_proj.data[e].t().contiguous()
            self.experts.append(expert)
        self.shared_expert = block.shared_expert

    def forward(self, hidden_states):
        x = hidden_states.reshape(-1, hidden_states.shape[-1])
        logits = self.router(x)
        top, chosen = torch.topk(logits, self.top_k, dim=1)
        weights = torch.sigmoid(top.float()).to(x.dtype)
        out = self.shared_expert(x)
        mask = torch.nn.functional.one_hot(chosen, num_classes=self.count).permute(2, 1, 0)
        for e in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero():
            e = int(e[0])
            choice, token = torch.where(mask[e])
            expert, rows = self.experts[e], x[token] * weights[token, choice, None]
            y = expert.down_proj(self.act(expert.gate_proj(rows)) * expert.up_proj(rows))
            out.index_add_(0, token, y)
        return out, logits


class ReferenceGraniteMoe(torch.nn.Module):
    """Granite's mixture of experts (transformers 5.24's `GraniteMoeMoE`, also in the shared and
    hybrid classes) over modules the reference's find_layers sees: the router an nn.Linear under
    the checkpoint's name (`router.layer`) and, per expert, the gate and up projections its 3-D
    `gate_up_proj` (`[experts, 2·inter, hidden]`) holds in halves and its down projection, each
    an nn.Linear. As transformers routes: the top-k router logits in f32, their softmax over the
    k returned in the model's dtype, the experts run by `routed_experts`. The shared MLP
    (`shared_mlp`) is the decoder layer's own, of nn.Linear already."""

    def __init__(self, block, config):
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        self.top_k, self.count = config.num_experts_per_tok, config.num_local_experts
        self.router = torch.nn.Module()
        self.router.layer = torch.nn.Linear(hidden, self.count, bias=False)
        self.router.layer.weight.data = block.router.weight.data.clone()
        self.act = block.experts.act_fn
        self.experts = linear_experts(block.experts, self.count, hidden, inter,
                                      ("gate_proj", "up_proj", "down_proj"))

    def forward(self, hidden_states):
        batch, seq, hidden = hidden_states.shape
        x = hidden_states.reshape(-1, hidden)
        top, chosen = self.router.layer(x).float().topk(self.top_k, dim=-1)
        weights = torch.softmax(top, dim=-1).type_as(x)
        return routed_experts(self.experts, self.act, x, chosen, weights, self.count).view(batch, seq, hidden)


# Mixtures of experts: the reference's view of their experts (above); Mixtral's named in its
# checkpoint's names (`block_sparse_moe`).
MIXTRAL = model.config.model_type == "mixtral"
# A vision-language model's language model's config (Qwen3-VL-MoE's is Qwen3-MoE's, its router
# always renormalising).
TEXT_CONFIG = getattr(model.config, "text_config", model.config)
if TEXT_CONFIG.model_type in ("mixtral", "qwen3_moe", "olmoe", "qwen2_moe", "qwen3_vl_moe_text"):
    for layer in model.model.layers:
        layer.mlp = ReferenceMoe(layer.mlp, TEXT_CONFIG)
if model.config.model_type == "gpt_oss":
    for layer in model.model.layers:
        layer.mlp = ReferenceGptOssMoe(layer.mlp, model.config)
if model.config.model_type in ("glm4_moe", "deepseek_v3"):
    # DeepSeek-V3's router is GLM-4.5's (`DeepseekV3TopkRouter`).
    for layer in model.model.layers[model.config.first_k_dense_replace:]:
        layer.mlp = ReferenceGlm4Moe(layer.mlp, model.config)
if model.config.model_type == "deepseek_v2":
    for layer in model.model.layers[model.config.first_k_dense_replace:]:
        layer.mlp = ReferenceDeepseekV2Moe(layer.mlp, model.config)
if model.config.model_type in ("granitemoe", "granitemoeshared", "granitemoehybrid"):
    for layer in model.model.layers:
        if getattr(layer, "block_sparse_moe", None) is not None:
            layer.block_sparse_moe = ReferenceGraniteMoe(layer.block_sparse_moe, model.config)
if model.config.model_type == "llama4_text":
    for layer in model.model.layers:
        if layer.is_moe_layer:
            layer.feed_forward = ReferenceLlama4Moe(layer.feed_forward, model.config)

# OPT (the reference's main_opt.py / lib/prune_opt.py): layers under model.decoder, six linears.
OPT = model.config.model_type == "opt"
# GPT-NeoX (Pythia): layers under gpt_neox.
NEOX = model.config.model_type == "gpt_neox"
# BLOOM (SparseGPT's bloom.py), Falcon, GPT-J, GPT-2, GPT-BigCode and GPT-Neo: layers under transformer.h;
# BLOOM's ALiBi is passed to each layer as a keyword argument, caught like the others.
TRANSFORMER_H = model.config.model_type in ("bloom", "falcon", "gptj", "gpt2", "gpt_bigcode", "gpt_neo")
# GPT-2's linears are Conv1D modules (weight stored [in, out]), which the reference's find_layers
# (nn.Linear only) would pass over: each becomes the nn.Linear it computes (the weight transposed,
# the same bias), as anyone running the reference on GPT-2 has to do; --save-pruned writes the
# weights back in Conv1D's layout, as the checkpoint and `wanda prune --save` hold them.
CONV1D = model.config.model_type == "gpt2"
if CONV1D:
    from transformers.pytorch_utils import Conv1D
    for block in model.transformer.h:
        for name, m in list(block.named_modules()):
            if isinstance(m, Conv1D):
                parent, child = name.rsplit(".", 1)
                linear = torch.nn.Linear(*m.weight.shape, dtype=m.weight.dtype)
                linear.weight.data = m.weight.data.t().contiguous()
                linear.bias.data = m.bias.data
                setattr(block.get_submodule(parent), child, linear)
load_s = time.time() - t0

# Calibrate and prune.
t0 = time.time()
calib_ids = tok(open(a.calib_text, encoding="utf-8").read(), return_tensors="pt").input_ids
random.seed(a.seed)
offsets = [random.randint(0, calib_ids.shape[1] - a.seqlen - 1) for _ in range(a.nsamples)]
samples = [calib_ids[:, i:i + a.seqlen] for i in offsets]

layers = (model.model.decoder.layers if OPT else model.gpt_neox.layers if NEOX
          else model.transformer.h if TRANSFORMER_H else model.model.layers)
hidden = model.config.hidden_size
inps = torch.zeros((a.nsamples, a.seqlen, hidden), dtype=DT)
layer_kwargs = {}


def by_name(layer, args, kwargs):
    """A layer call's arguments after the hidden states as keyword arguments: GPT-2's blocks
    are handed the cache and the causal mask by position."""
    names = list(inspect.signature(layer.forward).parameters)[1:]
    return {**dict(zip(names, args)), **kwargs}


class Catcher(torch.nn.Module):
    """Stands in for layer 0: keeps its input and keyword arguments, then stops the forward."""

    def __init__(self, module):
        super().__init__()
        self.module = module
        self.index = 0

    def forward(self, x, *args, **kwargs):
        inps[self.index] = x[0]
        self.index += 1
        layer_kwargs.update(by_name(self.module, args, kwargs))
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

# Each layer's own keyword arguments, caught on one full forward pass: Gemma 3's local and
# global layers take different rotary tables (and masks), which layer 0's would not give.
per_layer_kwargs = {}


def keep_kwargs(i):
    def hook(module, args, kwargs):
        per_layer_kwargs.setdefault(i, by_name(module, args[1:], kwargs))
    return hook


handles = [l.register_forward_pre_hook(keep_kwargs(i), with_kwargs=True) for i, l in enumerate(layers)]
with torch.no_grad():
    model(samples[0])
for h in handles:
    h.remove()
layer_index = {id(l): i for i, l in enumerate(layers)}


def run_layer(layer, x):
    out = layer(x.unsqueeze(0), **per_layer_kwargs.get(layer_index[id(layer)], layer_kwargs))
    return (out[0] if isinstance(out, tuple) else out)[0]


def linears(layer):
    """The layer's linears as the reference's find_layers sees them: every nn.Linear module, so
    a checkpoint's stacked matrix (Phi-3's qkv_proj and gate_up_proj, GPT-NeoX's
    query_key_value) is one linear; a layer's own, as GLM-4.5's first layers are dense before
    those with experts."""
    return [n for n, m in layer.named_modules() if isinstance(m, torch.nn.Linear)]


PREFIX = ("model.decoder.layers" if OPT else "gpt_neox.layers" if NEOX
          else "transformer.h" if TRANSFORMER_H else "model.layers")


def nm_mask(metric):
    """The reference's N:M mask: the `prune_n` lowest of every `prune_m` consecutive columns."""
    mask = torch.zeros_like(metric, dtype=torch.bool)
    for ii in range(0, metric.shape[1], prune_m):
        tmp = metric[:, ii:ii + prune_m].to(STAT_DT)
        mask.scatter_(1, ii + torch.topk(tmp, prune_n, dim=1, largest=False)[1], True)
    return mask


DUMPED = {}
PERTURB = None if a.perturb_scaler is None else torch.Generator().manual_seed(a.perturb_scaler)


def wanda_prune(m, scaler, ratio, name=None):
    """locuslab/wanda `prune_wanda`: |W| · sqrt(scaler_row), lowest per output row (stable)."""
    if PERTURB is not None:
        u = torch.rand(scaler.shape, generator=PERTURB, dtype=torch.float64) * 2 - 1
        scaler = (scaler.to(torch.float64) * (1 + u * 2.0 ** -23)).to(scaler.dtype)
    metric = torch.abs(m.weight.data) * torch.sqrt(scaler.reshape((1, -1)))
    if prune_n:
        mask = nm_mask(metric)
    else:
        mask = torch.zeros_like(metric, dtype=torch.bool)
        order = torch.sort(metric, dim=-1, stable=True)[1]
        mask.scatter_(1, order[:, :int(metric.shape[1] * ratio)], True)
    apply_swaps(mask, name)
    m.weight.data[mask] = 0


def apply_swaps(mask, name):
    """Decides the `--swap` pairs of linear `name` wanda's way in a mask (True = pruned)."""
    for swap in (s for s in a.swap if s.split(":")[0] == name):
        row, prune, keep = map(int, swap.split(":")[1:])
        if not mask[row, keep] or mask[row, prune]:
            sys.exit(f"--swap {swap}: nothing to swap; the reference must prune column {keep} "
                     f"and keep column {prune} of row {row}, and does not")
        mask[row, prune], mask[row, keep] = True, False


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


def magnitude_prune(m, ratio):
    """locuslab/wanda `prune_magnitude`: one threshold per matrix (`<=`), or N:M per row."""
    W = m.weight.data
    metric = torch.abs(W)
    if prune_n:
        mask = nm_mask(metric)
    else:
        thresh = torch.sort(metric.flatten())[0][int(W.numel() * ratio)]
        mask = metric <= thresh
    W[mask] = 0


def saliency(w, d, _channel):
    """SparseGPT's score of columns `w` with inverse-Hessian diagonal `d`: w² / d²."""
    return w ** 2 / (d.reshape((1, -1))) ** 2


def sparsegpt_prune(m, H, ratio, score=saliency, mask=None, blocksize=128, percdamp=0.01):
    """SparseGPT's `fasterprune` (IST-DASLab/sparsegpt f5c2500, as locuslab/wanda vendors it).
    `score(columns, diag(Hinv) of them, first channel)` chooses the block's (or N:M group's) mask
    from the weights as updated so far; a fixed `mask` replaces that choice, as locuslab/wanda's
    `AblateGPT.fasterprune` (lib/ablate.py) does for its sequential ablation."""
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
        if mask is not None:
            mask1 = mask[:, i1:i2]
        elif prune_n == 0:
            tmp = score(W1, torch.diag(Hinv1), i1)
            thresh = torch.sort(tmp.flatten())[0][int(tmp.numel() * ratio)]
            mask1 = tmp <= thresh
        else:
            mask1 = torch.zeros_like(W1) == 1
        for i in range(i2 - i1):
            w = W1[:, i]
            d = Hinv1[i, i]
            if prune_n != 0 and i % prune_m == 0 and mask is None:
                tmp = score(W1[:, i:i + prune_m], torch.diag(Hinv1)[i:i + prune_m], i1 + i)
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


def ablate_prune(m, st, ratio):
    """locuslab/wanda `prune_ablate` with `AblateGPT` (lib/ablate.py): SparseGPT's loop with the
    mask of `get_wanda_mask` / `get_mag_mask` on the dense weights (sequential), or with their
    metric recomputed per block from the updated weights (iterative)."""
    wanda = a.method == "wanda"
    root = torch.sqrt(st.scaler)

    def metric(w, _d, channel):
        return torch.abs(w) * root[channel:channel + w.shape[1]].reshape((1, -1)) if wanda \
            else torch.abs(w)

    if a.weight_update == "iterative":
        return sparsegpt_prune(m, st.H, ratio, score=metric)
    W0 = m.weight.data
    scores = metric(W0, None, 0)
    if prune_n:
        mask = nm_mask(scores)
    elif wanda:
        mask = torch.zeros_like(scores, dtype=torch.bool)
        order = torch.sort(scores, dim=-1, stable=True)[1]
        mask.scatter_(1, order[:, :int(scores.shape[1] * ratio)], True)
    else:
        mask = scores <= torch.sort(scores.flatten())[0][int(W0.numel() * ratio)]
    sparsegpt_prune(m, st.H, ratio, mask=mask)


class Stats:
    """One linear's input statistics, updated per calibration sample as the references'
    `add_batch` do: `scaler` = mean over samples of ‖x_j‖² (every method but magnitude), `H` = the
    2/n-scaled Gram matrix (sparsegpt), and for DSnoT (zyxxmu/DSnoT `lib/layerwrapper.py`)
    `sum` = mean over samples of the per-sample token sum of x_j, `var` = token-weighted running
    average of the per-sample population variances of x_j (not the pooled variance)."""

    def __init__(self, cols, scaler=False, gram=False, dsnot=False, ablate=False):
        self.n = self.tokens = 0
        # locuslab/wanda `AblateGPT.add_batch` adds the norms of the sqrt(2/n)-scaled inputs.
        self.ablate = ablate
        self.scaler = torch.zeros(cols, dtype=STAT_DT) if scaler else None
        self.H = torch.zeros(cols, cols, dtype=STAT_DT) if gram else None
        self.sum = torch.zeros(cols, dtype=STAT_DT) if dsnot else None
        self.var = torch.zeros(cols, dtype=STAT_DT) if dsnot else None

    def add(self, x):
        """x: one sample's inputs, [cols, tokens], STAT_DT."""
        if self.var is not None:
            t = x.shape[1]
            v = torch.var(x, dim=1, unbiased=False, keepdim=True)
            self.var = v if self.tokens == 0 else (self.var * self.tokens + v * t) / (self.tokens + t)
            self.tokens += t
        keep = self.n / (self.n + 1)
        for s in (self.scaler, self.H, self.sum):
            if s is not None:
                s *= keep
        self.n += 1
        if self.scaler is not None:
            xs = math.sqrt(2 / self.n) * x if self.ablate else x
            self.scaler += torch.norm(xs, p=2, dim=1) ** 2 / self.n
        if self.sum is not None:
            self.sum += torch.sum(x, dim=1) / self.n
        if self.H is not None:
            x = math.sqrt(2 / self.n) * x
            self.H += x.matmul(x.t())


def forward_all(layer, src, dst, stats=None):
    """Every calibration sample through `layer` (one at a time), `stats` filled by forward hooks."""
    handles = []
    for n, st in (stats or {}).items():
        def add_batch(_module, inputs, _output, st=st):
            st.add(inputs[0].reshape(-1, inputs[0].shape[-1]).t().to(STAT_DT))
        handles.append(layer.get_submodule(n).register_forward_hook(add_batch))
    for j in range(a.nsamples):
        dst[j] = run_layer(layer, src[j])
    for h in handles:
        h.remove()


def owl_layer_sparsities():
    """luuyin/OWL pass 1 (`prune_wanda_outlier` and its magnitude/sparsegpt twins): on the DENSE
    model, per layer the Wanda scores of all seven linears pooled, the percentage strictly above
    M × their mean (`check_outlier_mean`); dense outputs go to the next layer. Then the reference's
    numpy float64 normalisation. Returns (outlier ratios %, per-layer sparsities)."""
    global inps, outs
    ratios = []
    for layer in layers:
        stats = {n: Stats(layer.get_submodule(n).weight.shape[1], scaler=True) for n in linears(layer)}
        forward_all(layer, inps, outs, stats)
        score = torch.cat([(torch.abs(layer.get_submodule(n).weight.data)
                            * torch.sqrt(stats[n].scaler.reshape((1, -1)))).flatten() for n in linears(layer)])
        thresh = torch.mean(score) * a.owl_m
        ratios.append(float((score > thresh).sum().item()) / score.numel() * 100)
        # The reference runs the dense layer a second time to get its outputs; they are the same.
        inps, outs = outs, inps
    r = np.array(ratios)
    r = (r - r.min()) * (1 / (r.max() - r.min()) * a.owl_lambda * 2)
    r = r - np.mean(r) + (1 - a.sparsity)
    sparsities = []
    for density in r:
        s = 1 - density
        if s <= 0 and a.method != "magnitude":  # prune_mag_outlier has no clamp
            s = 0.01
        sparsities.append(s)
    return ratios, sparsities


def reorder_indices(v):
    """DSnoT `return_reorder_indice`, per row of v: the positions of the negative entries
    ascending, then a 0 for every exact zero, then the positions of the positive entries
    descending."""
    cols = v.shape[1]
    pos = torch.arange(cols).expand(v.shape)
    neg = torch.sort(torch.where(v < 0, pos, cols), dim=1)[0]
    plus = torch.sort(torch.where(v > 0, pos, cols), dim=1)[0].flip(1)
    return torch.where(neg == cols, 0, neg) + torch.where(plus == cols, 0, plus)


def pointers(rows, last):
    """Per row a front pointer at 0 and a back pointer at `last` (the reference's
    `indice_indice_list_for_*`)."""
    ptr = torch.zeros((rows, 2), dtype=torch.long)
    ptr[:, 1] = last
    return ptr


def take(order, ptr, side):
    """The entry of `order` (per row) at the pointer picked by `side` (0: the front one, moving
    right; 1: the back one, moving left); that pointer moves on."""
    at = ptr.gather(1, side)
    ptr.scatter_(1, side, at + 1 - 2 * side)
    return order.gather(1, at)


def dsnot_prune(name, m, st, full_name):
    """zyxxmu/DSnoT `prune_DSnoT` for one linear (its weights still dense, all statistics of the
    layer taken before any of its linears was pruned). All rows move together, the same number
    of cycles; a row whose `update` went False is frozen, but its pointers and mask writes go on
    as in the reference. `--swap` pairs of `full_name` change the initial mask."""
    W = m.weight.data
    rows, cols = W.shape
    contrib = W * st.sum.reshape((1, -1))  # DSnoT_metric, signed
    wanda = torch.abs(W) * torch.sqrt(st.scaler.reshape((1, -1)))
    if a.method == "wanda":
        init = wanda.clone()
    elif a.method == "magnitude":
        init = torch.abs(W)
    else:
        # SparseGPT's OBS saliency W² / diag(U)², U = upper Cholesky factor of the damped H⁻¹,
        # as in the reference; but there H is never accumulated at 4c029df (every score 0, the
        # mask "the first k columns"); here H is accumulated, which fixes that bug. No update.
        Wf = W.clone().to(STAT_DT)
        H = st.H.clone()
        dead = torch.diag(H) == 0
        H[dead, dead] = 1
        Wf[:, dead] = 0
        diag = torch.arange(cols)
        H[diag, diag] += 0.01 * torch.mean(torch.diag(H))
        H = torch.cholesky_inverse(torch.linalg.cholesky(H))
        U = torch.linalg.cholesky(H, upper=True)
        init = Wf ** 2 / (torch.diag(U).reshape((1, -1))) ** 2
    skip = a.dsnot_layers == "attention" and name.split(".")[0] == "mlp"
    mask = torch.zeros_like(W, dtype=torch.bool)
    if prune_n and skip:
        mask = nm_mask(init)
    elif prune_n:
        # The reference sorts each group with torch.sort (not stable); ties go to the lower index.
        for ii in range(0, cols, prune_m):
            group = torch.sort(init[:, ii:ii + prune_m].to(STAT_DT), dim=1, stable=True)[1]
            mask.scatter_(1, ii + group[:, :prune_n], True)
    else:
        k = int(cols * a.sparsity)
        order = torch.sort(init, dim=-1, stable=True)[1]
        mask.scatter_(1, order[:, :k], True)
    apply_swaps(mask, full_name)
    if skip:
        W[mask] = 0
        return
    # Reconstruction error per row: the summed contribution of the pruned weights.
    grow = contrib.clone()
    grow[~mask] = 0
    err = torch.sum(grow, dim=1, keepdim=True)
    sign0 = torch.sign(err)
    if a.dsnot_var_power:
        grow /= torch.pow(st.var.reshape((1, -1)), a.dsnot_var_power)
    grow_order = torch.sort(grow, dim=1, stable=True)[1]
    grow_ptr = pointers(rows, cols - 1)
    update = torch.ones((rows, 1), dtype=torch.bool)
    zero = torch.zeros((rows, 1), dtype=contrib.dtype)
    if prune_n:
        # Swaps stay in the regrown weight's group: the kept weight of lowest initial score goes
        # (pruned and already swapped ones sit at +inf; ties to the lower index).
        cand = init.clone()
        cand[mask] = float("inf")
        top = torch.max(cand, dim=1, keepdim=True)[0] + 1
        offsets = torch.arange(prune_m).reshape((1, -1))
        cycle = 1
        while not (torch.all(~update) or cycle > a.dsnot_cycles):
            cycle += 1
            side = (err > 0).long()
            gcol = take(grow_order, grow_ptr, side)
            gm = contrib.gather(1, gcol)
            start = gcol - gcol % prune_m
            pcol = start + torch.argmin(cand.gather(1, start + offsets), dim=1, keepdim=True)
            pm = contrib.gather(1, pcol)
            update = update & (sign0 == torch.sign(err + pm - gm)) \
                & (torch.abs(err) > a.dsnot_update_threshold)
            cand.scatter_(1, pcol, top)
            mask.scatter_(1, pcol, update)
            mask.scatter_(1, gcol, ~update)
            err += torch.where(update, pm, zero)
            err -= torch.where(update, gm, zero)
    else:
        # Pruning candidates: the kept weights by ascending Wanda score (whatever the initial
        # method), negative contributions first, positive ones reversed at the end.
        res = cols - int(cols * a.sparsity)
        wm = wanda.clone()
        wm[mask] = float("inf")
        kept = torch.sort(wm, dim=1, stable=True)[1][:, :res]
        prune_order = kept.gather(1, reorder_indices(contrib.gather(1, kept)))
        for swap in (s for s in a.swap_order if s.split(":")[0] == full_name):
            row, x, y = map(int, swap.split(":")[1:])
            at = [torch.nonzero(prune_order[row] == c).flatten() for c in (x, y)]
            if any(len(i) != 1 for i in at):
                sys.exit(f"--swap-order {swap}: columns {x} and {y} must both be kept in row {row}")
            prune_order[row, at[0]], prune_order[row, at[1]] = y, x
        prune_ptr = pointers(rows, res - 1)
        cycle = 0
        while not (torch.all(~update) or cycle >= a.dsnot_cycles):
            cycle += 1
            gcol = take(grow_order, grow_ptr, (err > 0).long())
            gm = contrib.gather(1, gcol)
            pcol = take(prune_order, prune_ptr, (err < 0).long())
            pm = contrib.gather(1, pcol)
            # The reference's --without_same_sign is `type=bool`, always True: no sign check here.
            update = update & (torch.abs(err) > a.dsnot_update_threshold)
            mask.scatter_(1, pcol, update)
            mask.scatter_(1, gcol, ~update)
            err += torch.where(update, pm, zero)
            err -= torch.where(update, gm, zero)
    W[mask] = 0


owl_ratios = layer_sparsities = None
with torch.no_grad():
    if a.owl:
        # The reference recaptures the layer-0 inputs for pass 2 from the same samples; a copy is
        # the same.
        layer0 = inps.clone()
        owl_ratios, layer_sparsities = owl_layer_sparsities()
        inps = layer0
    for i, layer in enumerate(layers):
        ratio = layer_sparsities[i] if a.owl else a.sparsity
        subset = {n: layer.get_submodule(n) for n in linears(layer)}
        if a.method == "magnitude" and not a.dsnot and not a.weight_update:
            for m in subset.values():
                magnitude_prune(m, ratio)
            forward_all(layer, inps, outs)
            inps, outs = outs, inps
            continue
        stats = {n: Stats(m.weight.shape[1],
                          scaler=a.dsnot or a.method in ("wanda", "ria") or bool(a.weight_update),
                          gram=a.method == "sparsegpt" or bool(a.weight_update), dsnot=a.dsnot,
                          ablate=bool(a.weight_update))
                 for n, m in subset.items()}
        forward_all(layer, inps, outs, stats)
        for n, m in subset.items():
            if a.dump_scaler and stats[n].scaler is not None:
                DUMPED[f"{PREFIX}.{i}.{n}.scaler"] = stats[n].scaler.float().clone()
            if a.weight_update:
                ablate_prune(m, stats[n], ratio)
            elif a.dsnot:
                dsnot_prune(n, m, stats[n], f"{PREFIX}.{i}.{n}")
            elif a.method == "wanda":
                wanda_prune(m, stats[n].scaler, ratio, f"{PREFIX}.{i}.{n}")
            elif a.method == "ria":
                ria_prune(m, stats[n].scaler)
            else:
                sparsegpt_prune(m, stats[n].H, ratio)
        forward_all(layer, inps, outs)
        inps, outs = outs, inps
prune_s = time.time() - t0

zeros = total = 0
for layer in layers:
    for n in linears(layer):
        w = layer.get_submodule(n).weight.data
        zeros += int((w == 0).sum())
        total += w.numel()

if a.dump_scaler:
    from safetensors.torch import save_file
    save_file(DUMPED, a.dump_scaler)
if a.save_pruned:
    from safetensors.torch import save_file
    def checkpoint_name(n):
        return n.replace("mlp.", "block_sparse_moe.", 1) if MIXTRAL else n
    save_file({f"{PREFIX}.{i}.{checkpoint_name(n)}.weight":
               (layer.get_submodule(n).weight.data.t() if CONV1D
                else layer.get_submodule(n).weight.data).float().contiguous()
               for i, layer in enumerate(layers) for n in linears(layer)}, a.save_pruned)

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
result = {
    "implementation": "pytorch", "method": a.method, "pattern": a.pattern,
    "sparsity_ratio": a.sparsity, "torch": torch.__version__, "threads": torch.get_num_threads(),
    "perplexity": float(torch.exp(torch.tensor(mean, dtype=torch.float64))), "mean_nll": mean,
    "windows": n, "seqlen": a.seqlen, "sparsity": zeros / total,
    "calibration_offsets": offsets,
    "load_seconds": load_s, "prune_seconds": prune_s, "eval_seconds": eval_s,
    "wall_seconds": time.time() - T_START,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
}
if a.weight_update:
    result["weight_update"] = a.weight_update
if a.owl:
    result["owl"] = {"m": a.owl_m, "lambda": a.owl_lambda}
    result["owl_outlier_ratios"] = owl_ratios
    result["layer_sparsities"] = [float(s) for s in layer_sparsities]
if a.dsnot:
    result["dsnot"] = {"initial_method": a.method, "cycles": a.dsnot_cycles,
                       "update_threshold": a.dsnot_update_threshold,
                       "var_power": a.dsnot_var_power, "layers": a.dsnot_layers}
print(json.dumps(result))
