#!/usr/bin/env python3
"""What transformers makes of a config with a key left out, for every fixture family.

For each fixture in tests/fixtures/models, and each key of its config.json (of a
vision-language model's: of its language model's config) that a config may leave out
(everything but the shape, names and bookkeeping), this drops that one key, has the model's
transformers config class read what is left, and records the values a forward pass of its
language model depends on: the RoPE base and scaling, the norms' epsilon, whether the head is tied, each
layer's sliding window, the head width, the kv heads, the context length, the activation, the
soft-caps, the rotated dimensions, the query scale and the experts' routing.
`tests/it/config_defaults.rs` reads the file it writes (a line naming the transformers
version, then one JSON line a case), resolves the same configs and asserts the same values, so
a default of wanda's that differs from the config class's fails there.

Run from the repository root in a venv with transformers:
    ~/.cache/wanda-ab-venv/bin/python scripts/config-defaults.py \
        > tests/fixtures/config-defaults.jsonl
"""

import copy
import json
import math
import pathlib
import sys

import transformers
from transformers import CONFIG_MAPPING

FIXTURES = pathlib.Path("tests/fixtures/models")

# Keys that are the model's shape or names, or that no forward pass reads (and every
# `*token_id`, left out by name in `main`).
KEEP = {
    "architectures", "model_type", "hidden_size", "n_embd", "d_model", "num_hidden_layers",
    "n_layer", "num_layers", "num_attention_heads", "n_head", "num_heads", "vocab_size",
    "intermediate_size", "ffn_dim", "n_inner", "transformers_version", "dtype", "torch_dtype",
    "initializer_range", "use_cache", "attention_dropout",
    "hidden_dropout", "embd_pdrop", "resid_pdrop", "attn_pdrop", "dropout", "activation_dropout",
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    "summary_first_dropout", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
    "quantization_config", "auto_map", "layerdrop", "embed_dropout", "attention_probs_dropout_prob",
    "hidden_dropout_prob", "classifier_dropout", "mlp_dropout", "residual_dropout", "emb_pdrop",
    "embedding_dropout", "init_std", "scale_attn_weights", "reorder_and_upcast_attn",
    "scale_attn_by_inverse_layer_idx", "use_return_dict", "return_dict", "name_or_path",
    "pretraining_tp", "max_window_layers", "keys_to_ignore_at_inference", "id2label",
    "label2id", "tokenizer_class", "router_aux_loss_factor", "aux_loss_alpha", "seq_aux",
    "use_flash_attention", "_attn_implementation",
}


def declared(c):
    """The attributes `c`'s class declares (a config also keeps any stray key it was given)."""
    names = set()
    for cls in type(c).__mro__:
        names.update(getattr(cls, "__annotations__", {}))
    return names


def first(c, *names):
    """The first of `names` that `c`'s class declares, as `c` has it; `None` if none."""
    for name in names:
        if name in declared(c) and hasattr(c, name):
            return getattr(c, name)
    return None


def full_rope_parameters(c):
    """`rope_parameters`, its full-attention layers' where it is given per layer type."""
    params = getattr(c, "rope_parameters", None)
    if isinstance(params, dict) and "full_attention" in params:
        params = params["full_attention"]
    return params if isinstance(params, dict) else None


def rope_theta(c):
    params = full_rope_parameters(c)
    if params and params.get("rope_theta") is not None:
        return float(params["rope_theta"])
    theta = getattr(c, "rope_theta", None)
    return None if theta is None else float(theta)


def windows(c, layers):
    if c.model_type == "gpt_neo":  # `attention_layers`: "global" or "local" (`window_size`)
        return [c.window_size if t == "local" else None for t in c.attention_layers]
    window = getattr(c, "sliding_window", None)
    types = getattr(c, "layer_types", None)
    if types is not None:
        return [window if t in ("sliding_attention", "chunked_attention") and window else None
                for t in types]
    if getattr(c, "use_sliding_window", True) is False:
        return [None] * layers
    return [window or None] * layers


def kv_heads(c):
    """The key/value heads as the family's attention takes them."""
    if c.model_type == "gpt_bigcode":
        return 1 if c.multi_query else c.num_attention_heads
    if c.model_type == "falcon":
        if c.new_decoder_architecture:
            return c.num_kv_heads
        return 1 if c.multi_query else c.num_attention_heads
    return first(c, "num_key_value_heads")


def semantics(c):
    """The values a forward pass reads, named as tests/it/config_defaults.rs names them."""
    layers = c.num_hidden_layers
    heads = c.num_attention_heads
    if c.model_type.startswith("deepseek"):  # its `head_dim` is the rotated part alone
        head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim
    else:  # read as the modelling code does, declared or not
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    out = {
        "rope_theta": rope_theta(c),
        "norm_eps": first(c, "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
                          "norm_epsilon", "norm_eps"),
        "tie_word_embeddings": getattr(c, "tie_word_embeddings", None),
        # The sliding layers' windows by layer, the others left out.
        "windows": {str(i): w for i, w in enumerate(windows(c, layers)) if w},
        "head_dim": head_dim,
        "kv_heads": kv_heads(c),
        "max_position_embeddings": getattr(c, "max_position_embeddings", None),
        "activation": first(c, "hidden_activation", "hidden_act", "activation_function"),
        "query_pre_attn_scalar": getattr(c, "query_pre_attn_scalar", None),
    }
    factor = first(c, "partial_rotary_factor", "rotary_pct")
    params = full_rope_parameters(c)
    if params:  # the scaling of the full layers' RoPE
        out["rope"] = {k: params[k] for k in ("rope_type", "factor",
                                              "original_max_position_embeddings")
                       if params.get(k) is not None}
    if factor is None and params:
        factor = params.get("partial_rotary_factor")
    if factor is not None:
        out["rotary_dim"] = int(head_dim * factor)
    experts = first(c, "num_local_experts", "num_experts", "n_routed_experts")
    if experts:
        out["experts"] = experts
        out["experts_per_token"] = first(c, "num_experts_per_tok", "num_experts_per_token")
    # What transformers reads but cannot run: its attention or router would fail on it.
    if out["kv_heads"] and heads % out["kv_heads"]:
        out["unrunnable"] = "num_key_value_heads"
    elif experts and (out["experts_per_token"] or 0) > experts:
        out["unrunnable"] = "num_experts_per_tok"
    for key in list(out):
        if out[key] is None or isinstance(out[key], float) and not math.isfinite(out[key]):
            del out[key]
    # The soft-caps where the class has them, None (no capping) a value of its own.
    for key, attr in (("attn_softcap", "attn_logit_softcapping"),
                      ("final_softcap", "final_logit_softcapping")):
        if hasattr(c, attr):
            out[key] = getattr(c, attr)
    return out


def main():
    cases = []
    for folder in sorted(FIXTURES.iterdir()):
        config_path = folder / "config.json"
        if not config_path.exists():
            continue
        config = json.loads(config_path.read_text())
        # transformers' own encoding of a non-finite float (Granite 4.0's Mamba
        # `time_step_limit`), which its class then refuses to read back.
        config = {k: v for k, v in config.items() if "__float__" not in json.dumps(v)}
        cls = CONFIG_MAPPING[config["model_type"]]
        # A vision-language wrapper: the keys of its language model's config, nested in
        # `text_config` or (Qwen2.5-VL's) beside `vision_config`.
        vision = "vision_config" in config
        nested = isinstance(config.get("text_config"), dict)
        for key in sorted(config["text_config"] if nested else config):
            if key in KEEP or key in ("vision_config", "text_config") or key.endswith("token_id"):
                continue
            # A copy of its own: the class writes into the dictionaries it is given.
            stripped = copy.deepcopy(config)
            del (stripped["text_config"] if nested else stripped)[key]
            try:
                resolved = cls.from_dict(stripped)
            except Exception as e:  # the class refuses it: nothing to hold wanda to
                print(f"{folder.name} without {key}: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            values = semantics(resolved.get_text_config() if vision else resolved)
            if vision:
                # Whether the head is tied is the whole model's config's to say (and the
                # checkpoint's: docs/family-notes.md), not its language config's.
                values.pop("tie_word_embeddings", None)
            cases.append({
                "fixture": folder.name,
                "without": key,
                "transformers": values,
            })
    print(json.dumps({"transformers_version": transformers.__version__}))
    for case in cases:
        print(json.dumps(case, sort_keys=True))


if __name__ == "__main__":
    main()
