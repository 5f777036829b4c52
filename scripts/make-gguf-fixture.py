#!/usr/bin/env python3
"""A tiny fixture (tests/fixtures/models/tiny-<family>) written as GGUF the way llama.cpp's
convert_hf_to_gguf.py writes the family, for tests/it/gguf_families.rs;
then, where transformers reads the architecture from GGUF (qwen2moe, qwen3moe, phi3, gemma2,
bloom, falcon with one kv head, stablelm, starcoder2, nemotron, gpt2), that file
loaded by transformers' own GGUF loader against the fixture's logits, as an independent reading.

    for f in mixtral qwen2_moe qwen3_moe olmoe phi3 phi3-longrope phi4-mini gemma2 cohere \
             cohere-qknorm granite smollm3 glm4 gpt_neox gpt_neox-sequential phi stablelm \
             stablelm-parallel falcon falcon-new bloom olmo cohere2 starcoder2 nemotron gpt2 \
             gpt_bigcode arcee exaone4 exaone4-full ernie4_5 granitemoe granitemoeshared \
             granitemoehybrid; do
      ~/.cache/wanda-ab-venv/bin/python scripts/make-gguf-fixture.py \
          tests/fixtures/models/tiny-$f tests/fixtures/gguf/tiny-$f.gguf
    done

What follows the converter (read from llama.cpp's convert_hf_to_gguf.py and gguf-py):
- the architecture: Mixtral is `llama` with `expert_count`; Qwen2-MoE `qwen2moe`, Qwen3-MoE
  `qwen3moe`, OLMoE `olmoe`, Phi-3 `phi3`, Gemma 2 `gemma2`, Cohere (Command R) `command-r`,
  Granite `granite`, SmolLM3 `smollm3`, GLM-4 `glm4`, GPT-NeoX `gptneox` and BLOOM `bloom`
  (their q/k/v stacks regrouped part by part), Phi `phi2`, StableLM `stablelm`, Falcon
  `falcon` (its stack as all queries, keys, values), OLMo 1 `olmo`, Cohere 2 `cohere2`,
  StarCoder2 `starcoder2` (no window: llama.cpp attends in full), Nemotron `nemotron` (norms
  as `1 + w`), Granite MoE and its shared class `granitemoe` (the stacked `input_linear`s split
  into gate and up by rows);
- tensor names from gguf-py's own TensorNameMap (not from the Rust side's table);
- every layer's experts stacked into one `[experts, rows, cols]` tensor per projection
  (`ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps`);
- for `llama`, `granite`, `smollm3` and `olmo`, q/k rows permuted for interleaved RoPE
  (LlamaModel.permute);
- the metadata keys of TextModel.set_gguf_parameters, the MoE classes and Phi3MiniModel (its
  rotated dimensions as `rope.dimension_count`, `sliding_window` 0 for none, LongRoPE as the
  tensors `rope_factors_long`/`rope_factors_short` with `rope.scaling.attn_factor`; `qkv_proj`
  and `gate_up_proj` kept stacked as `attn_qkv` and `ffn_up`).
The vocabulary is the fixture's word list as a SentencePiece (`llama`) vocabulary with
made-up scores (the tests feed ids, not text). Tensors are f32, so the logits can match transformers' to the float.
"""
import json
import math
import os
import sys

import gguf
import numpy as np
import torch
from safetensors.numpy import load_file

ARCH = {"mixtral": "llama", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "olmoe": "olmoe",
        "phi3": "phi3", "gemma2": "gemma2", "cohere": "command-r", "granite": "granite",
        "smollm3": "smollm3", "glm4": "glm4", "gpt_neox": "gptneox", "phi": "phi2",
        "stablelm": "stablelm", "falcon": "falcon", "bloom": "bloom", "olmo": "olmo",
        "cohere2": "cohere2", "starcoder2": "starcoder2", "nemotron": "nemotron", "gpt2": "gpt2",
        "gpt_bigcode": "starcoder", "arcee": "arcee", "exaone4": "exaone4",
        "ernie4_5": "ernie4_5", "gpt_oss": "gpt-oss", "granitemoe": "granitemoe",
        "granitemoeshared": "granitemoe", "granitemoehybrid": "granite"}
# LlamaModel and its subclasses (and OlmoModel) permute q/k rows for llama.cpp's interleaved RoPE.
PERMUTED = ("llama", "granite", "granitemoe", "smollm3", "olmo", "arcee")


def permute(w, n_head, n_head_kv):
    # LlamaModel.permute: rotate-half rows → interleaved pairs, per (kv) head.
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gpt_oss_tensors(tensors):
    """GptOssModel's experts: the interleaved gate_up stacks split into gate (even outputs) and
    up (odd outputs), `[experts, out, in]` as linears; MXFP4 `_blocks`/`_scales` repacked into
    ggml's MXFP4 blocks (`repack_mxfp4`: each block its E8M0 scale, then its 32 E2M1 nibbles
    as ggml lays them, element j in byte j's low nibble and element j + 16 in its high one,
    where the checkpoint pairs elements 2i and 2i + 1 in byte i), as raw uint8
    `[experts, out, in / 32 · 17]`; f32 stacks transposed; the sinks named as a weight."""
    out = {}
    for name, t in tensors.items():
        if name.endswith("self_attn.sinks"):
            out[name + ".weight"] = t
        elif name.endswith("mlp.experts.gate_up_proj_bias"):
            base = name.removesuffix("gate_up_proj_bias")
            out[base + "gate_proj.bias"], out[base + "up_proj.bias"] = t[..., ::2], t[..., 1::2]
        elif name.endswith("mlp.experts.down_proj_bias"):
            out[name.removesuffix("down_proj_bias") + "down_proj.bias"] = t
        elif name.endswith("mlp.experts.gate_up_proj"):
            base, t = name.removesuffix("gate_up_proj"), np.swapaxes(t, -1, -2)
            out[base + "gate_proj.weight"], out[base + "up_proj.weight"] = t[:, ::2], t[:, 1::2]
        elif name.endswith("mlp.experts.down_proj"):
            out[name + ".weight"] = np.swapaxes(t, -1, -2)
        elif name.endswith("_blocks"):
            base = name.removesuffix("_blocks")
            scales = tensors[base + "_scales"]
            if base.endswith("gate_up_proj"):
                stem = base.removesuffix("gate_up_proj")
                out[stem + "gate_proj.weight"] = mxfp4_ggml(t[:, ::2], scales[:, ::2])
                out[stem + "up_proj.weight"] = mxfp4_ggml(t[:, 1::2], scales[:, 1::2])
            else:
                out[base + ".weight"] = mxfp4_ggml(t, scales)
        elif not name.endswith("_scales"):
            out[name] = t
    return out


def mxfp4_ggml(blocks, scales):
    """The checkpoint's MXFP4 `[experts, rows, groups, 16]` blocks and `[experts, rows,
    groups]` scales as ggml's MXFP4 bytes, `[experts, rows, groups · 17]`."""
    lo, hi = blocks & 0x0F, blocks >> 4
    nibbles = np.stack([lo, hi], axis=-1).reshape(*blocks.shape[:-1], 32)  # element order
    packed = nibbles[..., :16] | (nibbles[..., 16:] << 4)
    raw = np.concatenate([scales[..., None], packed], axis=-1).astype(np.uint8)
    return raw.reshape(*blocks.shape[:-2], blocks.shape[-2] * 17)


def hf_tensors(folder):
    """The checkpoint under the names the converter maps, experts stacked per layer."""
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    if json.load(open(os.path.join(folder, "config.json")))["model_type"] == "gpt_oss":
        return gpt_oss_tensors(tensors)
    experts = {}
    out = {}
    for name, t in tensors.items():
        if ".experts." in name:
            layer, rest = name.split(".experts.")
            e, proj = rest.split(".", 1)
            experts.setdefault((layer, proj), {})[int(e)] = t
        else:
            out[name] = t
    for (layer, proj), by_index in experts.items():
        stacked = np.stack([by_index[e] for e in range(len(by_index))])
        # Mixtral's w1/w3/w2 are gate/up/down; the map knows both spellings.
        out[f"{layer}.experts.{proj}"] = stacked
    return out


def write(folder, out_path):
    hp = json.load(open(os.path.join(folder, "config.json")))
    family = hp["model_type"]
    arch = ARCH[family]
    n_layer = hp.get("num_hidden_layers", hp.get("n_layer"))
    n_head = hp.get("num_attention_heads", hp.get("n_head"))
    n_kv = hp.get("num_key_value_heads")
    w = gguf.GGUFWriter(out_path, arch)
    if arch == "gptneox":
        gptneox_metadata(w, hp)
    elif arch in OWN_METADATA:
        OWN_METADATA[arch](w, hp)
    elif arch == "phi3":
        phi3_metadata(w, hp)
    elif arch == "gemma2":
        gemma2_metadata(w, hp)
    else:
        common_metadata(w, hp)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = json.load(open(os.path.join(folder, "tokenizer.json")))["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([-float(i) for i in range(len(tokens))])
    w.add_token_types([gguf.TokenType.CONTROL] + [gguf.TokenType.NORMAL] * (len(tokens) - 1))
    w.add_bos_token_id(hp.get("bos_token_id", 1))
    w.add_eos_token_id(hp.get("eos_token_id", 2))

    model_arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    names = gguf.get_tensor_name_map(model_arch, n_layer)
    tensors = hf_tensors(folder)
    if family.startswith("granitemoe"):
        tensors = granite_split(tensors, hp)
    if arch == "phi3":
        tensors.update(longrope_tensors(w, hp))
    for name, t in sorted(tensors.items()):
        if arch in ("gemma2", "command-r") and name == "lm_head.weight":
            continue  # Gemma2Model.filter_tensors: llama.cpp ties the head
        if arch in ("gemma2", "nemotron") and name.endswith("norm.weight"):
            t = t + 1  # Gemma2Model's and NemotronModel's modify_tensors: the norms as `1 + w`
        if arch in ("gptneox", "bloom", "falcon") and "query_key_value." in name:
            t = qkv_part_by_part(t, n_head, falcon_kv_heads(hp) if arch == "falcon" else n_head)
        if arch == "bloom":
            name = name.removeprefix("transformer.")  # BloomModel.modify_tensors
        if arch == "gpt2" and name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            t = t.T  # GPT2Model.modify_tensors: Conv1D's [in, out] as a linear's [out, in]
        if name.startswith(("rope_factors", "blk.")):
            w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))
            continue
        if arch in PERMUTED and name.endswith(("q_proj.weight", "q_proj.bias")):
            t = permute(t, n_head, n_head)
        elif arch in PERMUTED and name.endswith(("k_proj.weight", "k_proj.bias")):
            t = permute(t, n_head, n_kv)
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            new = names.get_name(name + ".weight", try_suffixes=(".weight",))
        if new is None:
            sys.exit(f"{name}: gguf-py has no name for it under `{arch}`")
        if name.endswith("shared_expert_gate.weight"):
            # [1, hidden] squeezed to [hidden], as the converter's files hold it (transformers'
            # GGUF loader expands it back).
            t = t.reshape(-1)
        if t.dtype == np.uint8:
            w.add_tensor(new, np.ascontiguousarray(t), raw_dtype=gguf.GGMLQuantizationType.MXFP4)
            continue
        w.add_tensor(new, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return family


def granite_split(tensors, hp):
    """GraniteMoeModel.modify_tensors: each layer's `block_sparse_moe.input_linear` split by
    rows into the experts' gate and up stacks, and `shared_mlp.input_linear` into the shared
    MLP's gate and up (the rest mapped by gguf-py's names); without experts (Granite 4.0 whose
    layers are all attention layers, written as `granite`) the shared MLP as the dense one."""
    out = {}
    dense = not hp.get("num_local_experts")
    shared = ((gguf.MODEL_TENSOR.FFN_GATE, gguf.MODEL_TENSOR.FFN_UP) if dense
              else (gguf.MODEL_TENSOR.FFN_GATE_SHEXP, gguf.MODEL_TENSOR.FFN_UP_SHEXP))
    for name, t in tensors.items():
        bid = name.split(".")[2] if name.startswith("model.layers.") else None
        if dense and name.endswith("shared_mlp.output_linear.weight"):
            out[gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.FFN_DOWN].format(bid=bid) + ".weight"] = t
            continue
        for suffix, width, parts in (
                ("block_sparse_moe.input_linear.weight", hp["intermediate_size"],
                 (gguf.MODEL_TENSOR.FFN_GATE_EXP, gguf.MODEL_TENSOR.FFN_UP_EXP)),
                ("shared_mlp.input_linear.weight", hp.get("shared_intermediate_size"), shared)):
            if name.endswith(suffix):
                assert t.shape[-2] == 2 * width
                for part, half in zip(parts, (t[..., :width, :], t[..., width:, :])):
                    out[gguf.TENSOR_NAMES[part].format(bid=bid) + ".weight"] = half
                break
        else:
            out[name] = t
    return out


def rope_parameters(hp):
    """The RoPE keys wherever the config holds them (transformers 5: `rope_parameters`)."""
    params = dict(hp.get("rope_parameters") or {})
    params.update(hp.get("rope_scaling") or {})
    if hp.get("rope_theta") is not None:
        params["rope_theta"] = hp["rope_theta"]
    return params


def common_metadata(w, hp):
    n_head, n_kv = hp["num_attention_heads"], hp.get("num_key_value_heads")
    w.add_block_count(hp["num_hidden_layers"])
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(rope_parameters(hp).get("rope_theta", 10000.0))
    yarn = rope_parameters(hp)
    if yarn.get("rope_type") == "yarn" and yarn.get("factor") is not None:
        # TextModel.set_gguf_parameters: YaRN's factor, context and betas where given.
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(yarn["factor"])
        w.add_rope_scaling_orig_ctx_len(yarn["original_max_position_embeddings"])
        for key, add in (("beta_fast", w.add_rope_scaling_yarn_beta_fast),
                         ("beta_slow", w.add_rope_scaling_yarn_beta_slow)):
            if yarn.get(key) is not None:
                add(yarn[key])
    if "rms_norm_eps" in hp:
        w.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    else:
        w.add_layer_norm_eps(hp.get("layer_norm_eps", hp.get("norm_epsilon", hp.get("norm_eps"))))
    if (head_dim := hp.get("head_dim")) is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    else:
        w.add_rope_dimension_count(hp["hidden_size"] // n_head)
    if hp["model_type"].startswith("granite"):
        # GraniteModel.set_gguf_parameters: each multiplier as a scale, where it is not 0.
        for key, add in (("attention_multiplier", w.add_attention_scale),
                         ("embedding_multiplier", w.add_embedding_scale),
                         ("residual_multiplier", w.add_residual_scale),
                         ("logits_scaling", w.add_logit_scale)):
            if hp.get(key):
                add(hp[key])
        if hp["model_type"] == "granite":
            return
        # GraniteMoeModel.set_gguf_parameters: TextModel's expert counts (0 written as 0), the
        # shared width where it is not 0.
        w.add_expert_count(hp["num_local_experts"])
        w.add_expert_used_count(hp["num_experts_per_tok"])
        if hp.get("shared_intermediate_size"):
            w.add_expert_shared_feed_forward_length(hp["shared_intermediate_size"])
        if hp["model_type"] == "granitemoehybrid":
            # GraniteHybridModel.set_gguf_parameters (all layers attention, so written as
            # `granite`): the Mamba mixer's keys, kv heads per layer, RoPE.
            w.add_ssm_conv_kernel(hp["mamba_d_conv"])
            w.add_ssm_state_size(hp["mamba_d_state"])
            w.add_ssm_group_count(hp["mamba_n_groups"])
            w.add_ssm_inner_size(hp["mamba_expand"] * hp["hidden_size"])
            w.add_ssm_time_step_rank(hp["mamba_n_heads"])
            w.add_head_count_kv([n_kv] * hp["num_hidden_layers"])
            w.add_rope_scaling_finetuned(True)
        return
    if hp["model_type"] == "cohere":
        # CommandR2Model.set_gguf_parameters.
        w.add_logit_scale(hp["logit_scale"])
        w.add_rope_scaling_type(gguf.RopeScalingType.NONE)
        return
    if hp["model_type"] == "nemotron":
        # NemotronModel.set_gguf_parameters: the rotated part of each head, no RoPE scaling.
        w.add_vocab_size(hp["vocab_size"])
        rotary = rope_parameters(hp)["partial_rotary_factor"]
        w.add_rope_dimension_count(int(rotary * hp["hidden_size"]) // n_head)
        w.add_rope_scaling_type(gguf.RopeScalingType.NONE)
        return
    if hp["model_type"] == "olmo":
        # OlmoModel.set_gguf_parameters.
        w.add_layer_norm_eps(1e-5)
        if hp.get("clip_qkv") is not None:
            w.add_clamp_kqv(hp["clip_qkv"])
        return
    if hp["model_type"] == "cohere2":
        # Cohere2Model.set_gguf_parameters (Cohere2Config has no rotary_pct: all of each head).
        w.add_logit_scale(hp["logit_scale"])
        w.add_sliding_window(hp["sliding_window"])
        w.add_vocab_size(hp["vocab_size"])
        head_dim = hp["hidden_size"] // n_head
        w.add_rope_dimension_count(int(hp.get("rotary_pct", 1.0) * head_dim))
        w.add_rope_scaling_type(gguf.RopeScalingType.NONE)
        return
    if hp["model_type"] == "exaone4":
        # Exaone4Model.set_gguf_parameters: which layers slide, as one bool per layer.
        w.add_vocab_size(hp["vocab_size"])
        if hp.get("sliding_window") is not None:
            w.add_sliding_window(hp["sliding_window"])
            w.add_sliding_window_pattern([t == "sliding_attention" for t in hp["layer_types"]])
        return
    if hp["model_type"] == "glm4":
        # Glm4Model.set_gguf_parameters: the rotated part of each head.
        rotary = rope_parameters(hp).get("partial_rotary_factor", 0.5)
        w.add_rope_dimension_count(int(hp["head_dim"] * rotary))
        return
    if hp["model_type"] == "gpt_oss":
        # GptOssModel.set_gguf_parameters: the window and each expert's width.
        w.add_sliding_window(hp["sliding_window"])
        w.add_expert_feed_forward_length(hp["intermediate_size"])
    if not (hp.get("num_local_experts") or hp.get("num_experts")):
        return  # SmolLM3Model: LlamaModel's keys alone
    w.add_expert_count(hp.get("num_local_experts") or hp["num_experts"])
    w.add_expert_used_count(hp["num_experts_per_tok"])
    if (moe := hp.get("moe_intermediate_size")) is not None:
        w.add_expert_feed_forward_length(moe)
    if (shared := hp.get("shared_expert_intermediate_size")) is not None:
        w.add_expert_shared_feed_forward_length(shared)


def gptneox_metadata(w, hp):
    """GPTNeoXModel.set_gguf_parameters (no RoPE base: llama.cpp's default 10000)."""
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_block_count(hp["num_hidden_layers"])
    w.add_feed_forward_length(hp["intermediate_size"])
    rotary_pct = hp.get("rotary_pct") or rope_parameters(hp)["partial_rotary_factor"]
    w.add_rope_dimension_count(int(rotary_pct * (hp["hidden_size"] // hp["num_attention_heads"])))
    w.add_head_count(hp["num_attention_heads"])
    w.add_parallel_residual(hp.get("use_parallel_residual", True))
    w.add_layer_norm_eps(hp["layer_norm_eps"])


def phi2_metadata(w, hp):
    """Phi2Model.set_gguf_parameters, but with the config's kv heads and MLP width (the
    converter writes the query heads and 4 × hidden, which every released Phi has)."""
    n_embd, n_head = hp["hidden_size"], hp["num_attention_heads"]
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_block_count(hp["num_hidden_layers"])
    w.add_head_count(n_head)
    w.add_head_count_kv(hp["num_key_value_heads"])
    w.add_layer_norm_eps(hp["layer_norm_eps"])
    w.add_rope_dimension_count(int(rope_parameters(hp)["partial_rotary_factor"] * n_embd) // n_head)
    w.add_add_bos_token(False)


def stablelm_metadata(w, hp):
    """StableLMModel.set_gguf_parameters (no RoPE base: llama.cpp's default 10000)."""
    n_head = hp["num_attention_heads"]
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_block_count(hp["num_hidden_layers"])
    w.add_feed_forward_length(hp["intermediate_size"])
    rotary = rope_parameters(hp)["partial_rotary_factor"]
    w.add_rope_dimension_count(int(rotary * (hp["hidden_size"] // n_head)))
    w.add_head_count(n_head)
    w.add_head_count_kv(hp["num_key_value_heads"])
    w.add_parallel_residual(hp.get("use_parallel_residual", True))
    w.add_layer_norm_eps(hp["layer_norm_eps"])


def falcon_kv_heads(hp):
    """The kv heads FalconForCausalLM runs: the new architecture's num_kv_heads, else one
    (multi_query) or one per query head."""
    if hp.get("new_decoder_architecture"):
        return hp["num_kv_heads"]
    return 1 if hp.get("multi_query", True) else hp["num_attention_heads"]


def falcon_metadata(w, hp):
    """FalconModel.set_gguf_parameters (context 2048, no RoPE base, GELU and the parallel
    layer fixed by llama.cpp's graph)."""
    w.add_context_length(2048)
    w.add_tensor_data_layout("jploski")
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(4 * hp["hidden_size"])
    w.add_block_count(hp["num_hidden_layers"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv(falcon_kv_heads(hp))
    w.add_layer_norm_eps(hp["layer_norm_epsilon"])


def bloom_metadata(w, hp):
    """BloomModel.set_gguf_parameters."""
    n_embed = hp["hidden_size"]
    w.add_context_length(hp.get("seq_length", n_embed))
    w.add_embedding_length(n_embed)
    w.add_feed_forward_length(4 * n_embed)
    w.add_block_count(hp.get("num_hidden_layers", hp.get("n_layer")))
    n_head = hp.get("n_head", hp.get("num_attention_heads"))
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_eps(hp["layer_norm_epsilon"])


def gpt2_metadata(w, hp):
    """GPT2Model.set_gguf_parameters and StarCoderModel.set_gguf_parameters (one kv head), but
    with the config's MLP width (the converters write 4 × hidden, which every released GPT-2
    and StarCoder has) and `n_positions` where the config has no `n_ctx` (transformers 5 writes
    none; every released GPT-2 has the two equal)."""
    n_embd = hp["n_embd"]
    w.add_block_count(hp["n_layer"])
    w.add_context_length(hp.get("n_ctx", hp["n_positions"]))
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(hp.get("n_inner") or 4 * n_embd)
    w.add_head_count(hp["n_head"])
    if hp["model_type"] == "gpt_bigcode":
        w.add_head_count_kv(1)
    w.add_layer_norm_eps(hp["layer_norm_epsilon"])


OWN_METADATA = {"phi2": phi2_metadata, "stablelm": stablelm_metadata,
                "falcon": falcon_metadata, "bloom": bloom_metadata, "gpt2": gpt2_metadata,
                "starcoder": gpt2_metadata}


def qkv_part_by_part(t, n_head, n_kv):
    """The q/k/v stack grouped by kv head (each kv head's query heads, key, value; head by head
    where n_kv = n_head) as q, then k, then v: GPTNeoXModel's, BloomModel's and FalconModel's
    modify_tensors (a Falcon bias the same way, which that converter itself cannot do)."""
    rest = t.shape[1:]
    head_dim = t.shape[0] // (n_head + 2 * n_kv)
    qkv = t.reshape((n_kv, n_head // n_kv + 2, head_dim) + rest)
    q = qkv[:, :-2].reshape((-1,) + rest)
    k = qkv[:, -2].reshape((-1,) + rest)
    v = qkv[:, -1].reshape((-1,) + rest)
    return np.concatenate([q, k, v], axis=0)


def phi3_rotated(hp):
    rot_pct = hp.get("partial_rotary_factor") or rope_parameters(hp).get("partial_rotary_factor", 1.0)
    return int(rot_pct * hp["hidden_size"]) // hp["num_attention_heads"]


def phi3_metadata(w, hp):
    """Phi3MiniModel.set_gguf_parameters."""
    w.add_context_length(hp["max_position_embeddings"])
    w.add_rope_scaling_orig_ctx_len(hp["original_max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_block_count(hp["num_hidden_layers"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv(hp["num_key_value_heads"])
    w.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    w.add_rope_dimension_count(phi3_rotated(hp))
    w.add_rope_freq_base(rope_parameters(hp)["rope_theta"])
    w.add_sliding_window(hp.get("sliding_window") or 0)


def gemma2_metadata(w, hp):
    """Gemma2Model.set_gguf_parameters (no RoPE base: llama.cpp's default, Gemma 2's 10000;
    no query_pre_attn_scalar: llama.cpp scales queries by head_dim^-0.5, except for the 46
    layers of the 27B, by (hidden / heads)^-0.5)."""
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_block_count(hp["num_hidden_layers"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv(hp["num_key_value_heads"])
    w.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    w.add_key_length(hp["head_dim"])
    w.add_value_length(hp["head_dim"])
    w.add_attn_logit_softcapping(hp["attn_logit_softcapping"])
    w.add_final_logit_softcapping(hp["final_logit_softcapping"])
    w.add_sliding_window(hp["sliding_window"])


def longrope_tensors(w, hp):
    """Phi3MiniModel.generate_extra_tensors: LongRoPE's factors as tensors, its attention
    factor as metadata."""
    params = rope_parameters(hp)
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return {}
    scale = hp["max_position_embeddings"] / hp["original_max_position_embeddings"]
    assert kind in ("su", "longrope"), kind
    attn = math.sqrt(1 + math.log(scale) / math.log(hp["original_max_position_embeddings"])) \
        if scale > 1.0 else 1.0
    w.add_rope_scaling_attn_factors(attn)
    assert len(params["long_factor"]) == phi3_rotated(hp) // 2
    return {
        "rope_factors_long.weight": np.array(params["long_factor"], dtype=np.float32),
        "rope_factors_short.weight": np.array(params["short_factor"], dtype=np.float32),
    }


# The architectures whose GGUF files transformers' own loader reads.
TRANSFORMERS_READS = ("qwen2_moe", "qwen3_moe", "phi3", "gemma2", "bloom", "falcon", "stablelm",
                      "starcoder2", "nemotron", "gpt2")


def check_with_transformers(folder, out_path, family):
    """transformers' logits from the weights it reads in the file (where it reads the
    architecture), against the fixture's; where the file cannot hold the fixture's config
    (Gemma 2's query scale, SmolLM3's NoPE layers other than every fourth, GPT-NeoX's activation
    other than GELU) the reference is
    written beside the file, `<file>.logits.json`: transformers' logits under the config
    llama.cpp reads from the file (the folder's weights, and the file's where transformers
    reads it, which must agree)."""
    import transformers

    ref = json.load(open(os.path.join(folder, "logits.json")))
    ids = torch.tensor([ref["ids"]])
    # transformers' GGUF config maps read neither the expert widths nor Phi-3's window, rotated
    # share or LongRoPE factors nor Gemma 2's caps, so the fixture's config is given: the
    # weights alone come from the file, read by transformers' GGUF tensor processors.
    config = transformers.AutoConfig.from_pretrained(folder)
    own_reference = False
    if config.model_type == "gemma2" and config.query_pre_attn_scalar != config.head_dim:
        config.query_pre_attn_scalar = config.head_dim
        own_reference = True
    # llama.cpp fixes SmolLM3's NoPE layers at every fourth (n_no_rope_layer_step = 4).
    every_fourth = [int((i + 1) % 4 != 0) for i in range(config.num_hidden_layers)]
    if config.model_type == "smollm3" and config.no_rope_layers != every_fourth:
        config.no_rope_layers = every_fourth
        config.no_rope_layer_interval = 4
        own_reference = True
    # llama.cpp's StarCoder2 attends in full: the converter writes no window.
    if config.model_type == "starcoder2" and config.sliding_window is not None:
        config.sliding_window = None
        own_reference = True
    # A `gptneox` file names no activation: read as Pythia's exact GELU.
    if config.model_type == "gpt_neox" and config.hidden_act != "gelu":
        config.hidden_act = "gelu"
        own_reference = True
    # A `gpt-oss` file holds neither YaRN's `truncate` nor the experts' GLU constants: llama.cpp
    # rounds the ramp out (ggml_rope_yarn_corr_dims) and fixes the GLU at 1.702 and 7, and
    # transformers' GGUF reader takes YaRN's default (truncate) too.
    if config.model_type == "gpt_oss":
        if config.rope_parameters.get("truncate", True) is False:
            config.rope_parameters["truncate"] = True
            own_reference = True
        if (config.swiglu_alpha, config.swiglu_limit) != (1.702, 7.0):
            config.swiglu_alpha, config.swiglu_limit = 1.702, 7.0
            own_reference = True

    def run(model):
        with torch.no_grad():
            return model(ids).logits[0]

    from_file = None
    # transformers' GGUF loader reads Falcon's q/k/v stack as it is, which is right for one kv
    # head (Falcon-7B) only: it does not regroup the new architecture's grouped heads.
    grouped_falcon = family == "falcon" and falcon_kv_heads(config.to_dict()) != 1
    if family in TRANSFORMERS_READS and not grouped_falcon:
        from_file = run(transformers.AutoModelForCausalLM.from_pretrained(
            os.path.dirname(os.path.abspath(out_path)), gguf_file=os.path.basename(out_path),
            config=config, dtype=torch.float32))
    if not own_reference:
        if from_file is None:
            return 0.0
        diff = (from_file - torch.tensor(ref["logits"])).abs().max().item()
        print(f"{out_path}: transformers {transformers.__version__} read from GGUF, "
              f"max |logit - fixture logit| = {diff:.3g}")
        return diff
    logits = run(transformers.AutoModelForCausalLM.from_pretrained(
        folder, config=config, dtype=torch.float32))
    if from_file is not None:
        diff = (logits - from_file).abs().max().item()
        print(f"{out_path}: transformers read from GGUF against the folder, both under the "
              f"file's config: max |logit difference| = {diff:.3g}")
        if diff > 1e-4:
            return diff
    with open(out_path + ".logits.json", "w") as f:
        json.dump({"ids": ref["ids"], "logits": logits.tolist(),
                   "config": {k: getattr(config, k) for k in
                              ("query_pre_attn_scalar", "no_rope_layers", "hidden_act",
                               "sliding_window", "swiglu_alpha", "swiglu_limit")
                              if hasattr(config, k)},
                   "transformers": transformers.__version__}, f)
    print(f"wrote {out_path}.logits.json")
    return 0.0


if __name__ == "__main__":
    folder, out_path = sys.argv[1], sys.argv[2]
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    family = write(folder, out_path)
    print(f"wrote {out_path} ({os.path.getsize(out_path)} bytes)")
    if check_with_transformers(folder, out_path, family) > 1e-4:
        sys.exit("transformers' GGUF reading differs from the fixture")
