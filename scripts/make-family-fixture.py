#!/usr/bin/env python3
"""Tiny random models of a decoder family, made and run by transformers, for the conformance
tests in tests/it/families.rs: the Rust side loads the folder and must reproduce the logits.

    for f in llama qwen2 qwen3 mistral phi3 gemma2 gemma3 opt gpt_neox gpt_neox-sequential bloom \
             falcon falcon-new falcon-sequential phi gemma stablelm stablelm-parallel olmo2 olmo3 \
             phi3-longrope phi4-mini smollm3 granite glm glm4 qwen2-sliding cohere cohere-qknorm cohere2 smollm3-sliding olmo mixtral \
             qwen3_moe olmoe qwen2_moe starcoder2 gptj nemotron gpt2 gpt_bigcode gpt_bigcode-mha arcee exaone4 exaone4-full gpt_neo ernie4_5 \
             gpt_oss gpt_oss-mxfp4 glm4_moe deepseek_v2 deepseek_v3 deepseek_v3-fp8 llama4 \
             deepseek_v2-16e deepseek_v3-16e glm4_moe-16e \
             granitemoe granitemoeshared granitemoehybrid granitemoehybrid-moe ministral; do
      ~/.cache/wanda-ab-venv/bin/python scripts/make-family-fixture.py $f tests/fixtures/models/tiny-$f
    done

Writes config.json, model.safetensors (f32), a word-level tokenizer.json and logits.json
(`ids`, `logits` of shape [len(ids), vocab], and the transformers version) into the folder.
Seeded: the same transformers version writes the same files.
"""
import json
import sys

import torch
import transformers

VOCAB = 96
IDS = [1, 5, 9, 3, 31, 0, 17, 64, 95, 2, 40, 41, 7, 7, 80, 12]


def config(family):
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                  initializer_range=0.25)
    if family == "llama":
        return transformers.LlamaConfig(**common)
    if family == "qwen2":
        # q/k/v biases, no output bias.
        return transformers.Qwen2Config(rope_theta=1_000_000.0, **common)
    if family == "qwen2-sliding":
        # Qwen2 with use_sliding_window (no released model sets it): the second of three
        # layers slides (window 5 < 16 ids), from max_window_layers = 1; the third is named a
        # full layer by layer_types, which wins over max_window_layers.
        common.update(num_hidden_layers=3)
        return transformers.Qwen2Config(
            rope_theta=1_000_000.0, use_sliding_window=True, sliding_window=5,
            max_window_layers=1,
            layer_types=["full_attention", "sliding_attention", "full_attention"], **common)
    if family == "cohere-qknorm":
        # Command R+: Cohere's layer with a LayerNorm of each query and key head, gains of its
        # own per head ([4, 16] and [2, 16]).
        common.update(tie_word_embeddings=True)
        return transformers.CohereConfig(logit_scale=0.3, layer_norm_eps=1e-5, use_qk_norm=True,
                                         rope_theta=10_000.0, pad_token_id=0, **common)
    if family == "cohere":
        # Command R / Aya: a parallel layer on one bias-free LayerNorm, interleaved RoPE over
        # the whole head, biases on all four attention projections (attention_bias), the
        # logits times logit_scale, a tied head.
        common.update(tie_word_embeddings=True)
        return transformers.CohereConfig(logit_scale=0.3, layer_norm_eps=1e-5,
                                         attention_bias=True, rope_theta=10_000.0,
                                         pad_token_id=0, **common)
    if family == "nemotron":
        # Nemotron (Minitron): `1 + w` LayerNorms with random biases (below), half of each
        # head rotating, the ungated squared-ReLU MLP, 2 kv heads for 4 query heads, untied.
        common.pop("rms_norm_eps")
        return transformers.NemotronConfig(norm_eps=1e-5, hidden_act="relu2", head_dim=16,
                                           partial_rotary_factor=0.5, rope_theta=10_000.0,
                                           **common)
    if family == "gptj":
        # GPT-J: a parallel layer on one LayerNorm (`ln_1`), interleaved RoPE on 8 of each
        # head's 16 dimensions, no attention biases, random MLP and LM-head biases (below), an
        # ungated tanh GELU MLP 112 wide, an untied head with a bias, GPT-2's key names.
        return transformers.GPTJConfig(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                       rotary_dim=8, n_positions=128, n_inner=112,
                                       layer_norm_epsilon=1e-5, tie_word_embeddings=False,
                                       bos_token_id=1, eos_token_id=2, initializer_range=0.25)
    if family == "ernie4_5":
        # ERNIE 4.5: interleaved RoPE over the whole head, random biases on every linear
        # (use_bias; below), 2 kv heads for 4 query heads, tied.
        common.update(tie_word_embeddings=True)
        return transformers.Ernie4_5Config(use_bias=True, head_dim=16, rope_theta=500_000.0,
                                           pad_token_id=0, **common)
    if family == "gpt_neo":
        # GPT-Neo: GPT-2's layer with q/k/v linears of their own (no biases), unscaled scores,
        # a global then a local layer (window 6 < 16 ids), random biases (below), tied.
        return transformers.GPTNeoConfig(
            vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=112,
            max_position_embeddings=128, attention_types=[[["global", "local"], 1]],
            window_size=6, layer_norm_epsilon=1e-5, bos_token_id=1, eos_token_id=2,
            initializer_range=0.25)
    if family in ("exaone4", "exaone4-full"):
        # EXAONE 4.0: output norms alone, per-head q/k norms; the 32B's layout: local, local,
        # global layers (window 6 < 16 ids; given as the count 3), the global one NoPE; the
        # 1.2B's: no window, every layer full and rotating, tied.
        common.update(num_hidden_layers=3)
        if family == "exaone4-full":
            common.update(tie_word_embeddings=True)
            return transformers.Exaone4Config(sliding_window=None,
                                              layer_types=["full_attention"] * 3,
                                              rope_theta=1_000_000.0, **common)
        return transformers.Exaone4Config(sliding_window=6, sliding_window_pattern=3,
                                          rope_theta=1_000_000.0, **common)
    if family == "arcee":
        # Arcee (AFM-4.5B): Llama's layer with the ungated squared-ReLU MLP, random biases on
        # every linear (attention_bias, mlp_bias; below), YaRN ×4 over 32 positions (as AFM's
        # ×16 over 4096), untied.
        return transformers.ArceeConfig(
            hidden_act="relu2", attention_bias=True, mlp_bias=True,
            rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 10_000.0,
                             "original_max_position_embeddings": 32},
            **common)
    if family == "gpt2":
        # GPT-2: learned positions from row 0, LayerNorms, random biases everywhere (below),
        # Conv1D weights, q/k/v stacked part by part in c_attn, the ungated tanh GELU MLP 112
        # wide, a tied head.
        return transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                       n_positions=128, n_inner=112, layer_norm_epsilon=1e-5,
                                       bos_token_id=1, eos_token_id=2, initializer_range=0.25)
    if family in ("gpt_bigcode", "gpt_bigcode-mha"):
        # GPT-BigCode (StarCoder 1): GPT-2's layer with plain linears and one kv head for the 4
        # query heads (c_attn: all queries, the key, the value); without multi_query, q/k/v
        # stacked head by head.
        return transformers.GPTBigCodeConfig(
            vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=128, n_inner=112,
            layer_norm_epsilon=1e-5, multi_query=family == "gpt_bigcode", bos_token_id=1,
            eos_token_id=2, initializer_range=0.25)
    if family == "starcoder2":
        # StarCoder2: LayerNorms and biases on every linear (random, below), the ungated tanh
        # GELU MLP (c_fc, c_proj), 2 kv heads for 4 query heads, a sliding window of 6 < 16
        # ids on every layer, a tied head.
        common.pop("rms_norm_eps")
        common.update(tie_word_embeddings=True)
        return transformers.Starcoder2Config(norm_epsilon=1e-5, use_bias=True, sliding_window=6,
                                             hidden_act="gelu_pytorch_tanh",
                                             rope_theta=100_000.0, **common)
    if family == "cohere2":
        # Command R7B: Cohere's layer, three sliding layers of four (window 6 < 16 ids) that
        # alone rotate, the fourth full and NoPE.
        common.update(tie_word_embeddings=True, num_hidden_layers=4)
        return transformers.Cohere2Config(logit_scale=0.3, layer_norm_eps=1e-5,
                                          sliding_window=6, rope_theta=10_000.0,
                                          pad_token_id=0, **common)
    if family == "qwen3":
        # head_dim 32 ≠ hidden / heads (16), as in the real Qwen3 models.
        return transformers.Qwen3Config(head_dim=32, rope_theta=1_000_000.0,
                                        attention_bias=False, **common)
    if family == "phi3":
        # Stacked qkv_proj and gate_up_proj, and a sliding window shorter than the ids.
        return transformers.Phi3Config(sliding_window=7, pad_token_id=0, **common)
    if family == "phi3-longrope":
        # Phi-3.5-mini's RoPE: LongRoPE over a pre-training context of 16 positions, the 16 ids
        # within it (short factors), the attention factor from max_position_embeddings / 16 = 8:
        # √(1 + ln 8 / ln 16) = 1.3229.
        return transformers.Phi3Config(
            original_max_position_embeddings=16, pad_token_id=0,
            rope_scaling={"rope_type": "longrope",
                          "short_factor": [1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0],
                          "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 24.0, 32.0, 48.0]},
            **common)
    if family == "phi4-mini":
        # Phi-4-mini's layout: three quarters of each head rotating (12 of 16 dimensions, 6
        # pairs), LongRoPE over a context of 8 that the 16 ids pass (long factors; attention
        # factor √(1 + ln 16 / ln 8) = 1.5275), tied embeddings.
        common.update(tie_word_embeddings=True)
        return transformers.Phi3Config(
            original_max_position_embeddings=8, partial_rotary_factor=0.75, pad_token_id=0,
            rope_scaling={"rope_type": "longrope",
                          "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                          "long_factor": [1.0, 3.0, 6.0, 12.0, 20.0, 40.0]},
            **common)
    if family == "smollm3":
        # SmolLM3: Llama's layer with NoPE layers, here every second of three (rotating, NoPE,
        # rotating) from no_rope_layer_interval, and a tied head.
        common.update(num_hidden_layers=3, tie_word_embeddings=True)
        return transformers.SmolLM3Config(no_rope_layer_interval=2, rope_theta=5_000_000.0,
                                          pad_token_id=0, **common)
    if family == "smollm3-sliding":
        # SmolLM3 with use_sliding_window (no released model sets it): the NoPE layer (the
        # second of three) slides, window 5 < 16 ids.
        common.update(num_hidden_layers=3, tie_word_embeddings=True)
        return transformers.SmolLM3Config(no_rope_layer_interval=2, rope_theta=5_000_000.0,
                                          use_sliding_window=True, sliding_window=5,
                                          pad_token_id=0, **common)
    if family == "granite":
        # Granite 3.x: Llama's layer with its four factors (each moves the logits when left
        # out; the script prints by how much), biases on the MLP's linears, a tied head.
        common.update(tie_word_embeddings=True)
        return transformers.GraniteConfig(embedding_multiplier=3.0, residual_multiplier=0.4,
                                          attention_multiplier=0.1, logits_scaling=2.5,
                                          mlp_bias=True, pad_token_id=0, **common)
    if family in ("granitemoe", "granitemoeshared"):
        # Granite MoE (granite-3.x-1b-a400m): Granite's four factors, four experts 48 wide
        # stacked [experts, out, in] (block_sparse_moe.input_linear, output_linear), two per
        # token by the softmax over the top logits, a tied head; the shared class adds an
        # ungated shared MLP 80 wide (shared_mlp).
        common.update(tie_word_embeddings=True, intermediate_size=48)
        shared = {} if family == "granitemoe" else dict(shared_intermediate_size=80)
        cls = (transformers.GraniteMoeConfig if family == "granitemoe"
               else transformers.GraniteMoeSharedConfig)
        return cls(embedding_multiplier=3.0, residual_multiplier=0.4, attention_multiplier=0.1,
                   logits_scaling=2.5, num_local_experts=4, num_experts_per_tok=2,
                   pad_token_id=0, **shared, **common)
    if family in ("granitemoehybrid", "granitemoehybrid-moe"):
        # Granite 4.0 with attention layers only. granitemoehybrid: granite-4.0-micro's layout,
        # no experts, the shared MLP 112 wide as the dense one (intermediate_size the same, as
        # micro's config has it and llama.cpp's converter needs), RoPE, untied.
        # granitemoehybrid-moe: four experts 48 wide, two per token, beside the shared MLP 80
        # wide, and no layer rotating (position_embedding_type nope, as the -h- models).
        moe = family.endswith("-moe")
        common.update(intermediate_size=48 if moe else 112)
        return transformers.GraniteMoeHybridConfig(
            embedding_multiplier=3.0, residual_multiplier=0.4, attention_multiplier=0.1,
            logits_scaling=2.5, num_local_experts=4 if moe else 0,
            num_experts_per_tok=2 if moe else 0, shared_intermediate_size=80 if moe else 112,
            layer_types=["attention"] * common["num_hidden_layers"],
            position_embedding_type="nope" if moe else "rope", pad_token_id=0, **common)
    if family in ("glm", "glm4"):
        # GLM, GLM-4: interleaved RoPE on half of each head (8 of 16 dimensions), random q/k/v
        # biases, stacked gate_up_proj; GLM-4 adds its output norms. head_dim given: the config
        # classes default it to 128.
        cls = transformers.GlmConfig if family == "glm" else transformers.Glm4Config
        return cls(head_dim=16, partial_rotary_factor=0.5, attention_bias=True, pad_token_id=0,
                   **common)
    if family == "mistral":
        # A window shorter than the ids, so the sliding window shows in the logits.
        return transformers.MistralConfig(sliding_window=6, **common)
    if family == "ministral":
        # Ministral (Ministral-8B-Instruct-2410): Mistral's config, a window on the sliding
        # layers of `layer_types` only (window 5 < 16 ids: a sliding layer, a full one, a
        # sliding one), every layer on the same RoPE, no biases; `head_dim` given, as the
        # released config does (MinistralAttention reads no default for it).
        common.update(num_hidden_layers=3)
        return transformers.MinistralConfig(
            sliding_window=5, rope_theta=100_000.0, head_dim=16,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"], **common)
    if family == "gemma3":
        # Gemma 3's text decoder: a sliding layer, a global one, a sliding one (window 6 < 16
        # ids), the local and global RoPE bases apart, head_dim 32 ≠ hidden / heads, queries
        # scaled by query_pre_attn_scalar 24 ≠ head_dim, tied embeddings as in the real models.
        common.update(tie_word_embeddings=True, num_hidden_layers=3)
        return transformers.Gemma3TextConfig(
            head_dim=32, query_pre_attn_scalar=24, sliding_window=6,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}},
            pad_token_id=0, **common)
    if family == "gemma2":
        # Gemma 2: Gemma 3's layer without q/k norms, soft-capped attention scores and logits
        # (caps small enough to bend these random model's scores and logits, where the real
        # models' 50 and 30 would barely touch them), sliding and full layers alternating, one
        # RoPE base.
        common.update(tie_word_embeddings=True, num_hidden_layers=3)
        return transformers.Gemma2Config(
            head_dim=32, query_pre_attn_scalar=24, sliding_window=6, attn_logit_softcapping=2.0,
            final_logit_softcapping=10.0, pad_token_id=0, **common)
    if family == "opt":
        # OPT's layer (LayerNorms, biases, ReLU fc1/fc2, learned positions offset by 2) with
        # OPT's own key names; multi-head attention and tied embeddings as in every OPT.
        return transformers.OPTConfig(
            vocab_size=VOCAB, hidden_size=64, ffn_dim=112, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=128, word_embed_proj_dim=64,
            init_std=0.25, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if family.startswith("gpt_neox"):
        # GPT-NeoX (Pythia): q/k/v stacked head by head in query_key_value, a quarter of each
        # head's 16 dimensions rotating (Pythia's rotary_pct), LayerNorms, biased linears, the
        # exact-GELU MLP without a gate, an untied embed_out. `gpt_neox` has Pythia's parallel
        # residual; `gpt_neox-sequential` the sequential layer, half of each head rotating and
        # GPT-NeoX-20B's tanh GELU (`gelu_fast`).
        parallel = family == "gpt_neox"
        return transformers.GPTNeoXConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=128,
            rotary_pct=0.25 if parallel else 0.5, rotary_emb_base=10_000,
            use_parallel_residual=parallel, hidden_act="gelu" if parallel else "gelu_fast",
            tie_word_embeddings=False, initializer_range=0.25, bos_token_id=1, eos_token_id=2)
    if family == "bloom":
        # BLOOM: ALiBi instead of positions (5 heads, so the slopes take the branch for a head
        # count that is not a power of two), a LayerNorm of the embeddings, q/k/v stacked head
        # by head in query_key_value, biased linears, the tanh-GELU MLP 4 × hidden wide, and
        # the head tied to the embeddings as in every BLOOM.
        return transformers.BloomConfig(
            vocab_size=VOCAB, hidden_size=80, n_layer=2, n_head=5, layer_norm_epsilon=1e-5,
            initializer_range=0.25, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if family.startswith("falcon"):
        # Falcon: `falcon` is Falcon-7B's layer (one key/value head, attention and MLP side by
        # side reading one input_layernorm, no biases); `falcon-new` the new decoder
        # architecture of 40B/180B (2 kv heads for 4 query heads, ln_attn and ln_mlp), with
        # biases so that their stacking by kv head shows; `falcon-sequential` the sequential
        # layer with a key/value head per query head and biases. q/k/v stacked in
        # query_key_value by kv head, the exact-GELU MLP 4 × hidden wide, the head tied.
        new = family == "falcon-new"
        sequential = family == "falcon-sequential"
        return transformers.FalconConfig(
            vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            new_decoder_architecture=new, num_kv_heads=2 if new else None,
            multi_query=family == "falcon", parallel_attn=not sequential, bias=family != "falcon",
            max_position_embeddings=128, initializer_range=0.25, bos_token_id=1, eos_token_id=2)
    if family == "phi":
        # Phi-2's layer: attention and MLP side by side on one LayerNorm, 0.4 of each head's
        # 16 dimensions rotating (int(6.4) = 6), biases on every linear and on the untied LM
        # head, the tanh-GELU fc1/fc2; grouped kv heads, which PhiConfig allows.
        return transformers.PhiConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, partial_rotary_factor=0.4,
            max_position_embeddings=128, layer_norm_eps=1e-5, hidden_act="gelu_new",
            tie_word_embeddings=False, initializer_range=0.25, bos_token_id=1, eos_token_id=2)
    if family == "gemma":
        # Gemma 1: `1 + w` RMSNorms, the legacy `hidden_act: "gelu"` that transformers reads as
        # the tanh GELU, embeddings scaled by √hidden, head_dim 32 ≠ hidden / heads (Gemma 7B's
        # 256 ≠ 192), a tied head.
        common.update(tie_word_embeddings=True)
        return transformers.GemmaConfig(head_dim=32, hidden_act="gelu", pad_token_id=0, **common)
    if family.startswith("stablelm"):
        # StableLM: Llama's names and SwiGLU with LayerNorms, a quarter of each head's 16
        # dimensions rotating, q/k/v biases (StableLM 2's use_qkv_bias), an untied head;
        # `stablelm-parallel` has StableLM 2 12B's parallel layer on one input_layernorm.
        return transformers.StableLmConfig(
            use_qkv_bias=True, partial_rotary_factor=0.25, layer_norm_eps=1e-5,
            use_parallel_residual=family == "stablelm-parallel", **common)
    if family == "olmo":
        # OLMo 1: LayerNorms without gain or bias (no norm tensors in the checkpoint), q/k/v
        # clamped to ±1.2 (the real 0424/0724 models clip at 8; this model's projections are
        # smaller, and the clamp must bite).
        return transformers.OlmoConfig(clip_qkv=1.2, pad_token_id=0, **common)
    if family == "mixtral":
        # Mixtral: Mistral's attention with four SwiGLU experts of which each token takes two,
        # their softmax probabilities renormalised over the two.
        return transformers.MixtralConfig(num_local_experts=4, num_experts_per_tok=2,
                                          rope_theta=1_000_000.0, **common)
    if family == "qwen3_moe":
        # Qwen3-MoE: Qwen3's attention (q/k norms, head_dim 32) with four experts 48 wide of
        # which each token takes two, renormalised (norm_topk_prob, as the released models).
        return transformers.Qwen3MoeConfig(num_experts=4, num_experts_per_tok=2,
                                           moe_intermediate_size=48, norm_topk_prob=True,
                                           head_dim=32, pad_token_id=0, **common)
    if family == "qwen2_moe":
        # Qwen2-MoE: Qwen2's attention (random q/k/v biases below), four experts 48 wide of
        # which each token takes two, not renormalised, beside a shared expert 80 wide gated
        # by sigmoid(shared_expert_gate(x)).
        return transformers.Qwen2MoeConfig(num_experts=4, num_experts_per_tok=2,
                                           moe_intermediate_size=48,
                                           shared_expert_intermediate_size=80,
                                           pad_token_id=0, **common)
    if family == "olmoe":
        # OLMoE: q/k norms across the heads, four experts of which each token takes two, not
        # renormalised (norm_topk_prob false, as the released models).
        return transformers.OlmoeConfig(num_experts=4, num_experts_per_tok=2, pad_token_id=0,
                                        **common)
    if family == "olmo2":
        # OLMo 2: no pre-norms, RMSNorms on the attention and MLP outputs, q/k RMSNorms over
        # all heads of a position (64- and 32-wide gains), grouped kv heads, an untied head.
        return transformers.Olmo2Config(rope_theta=500_000.0, pad_token_id=0, **common)
    if family == "olmo3":
        # OLMo 3: OLMo 2's layer, a sliding layer, a full one and a sliding one (window 6 < 16
        # ids); the full layers under YaRN (×4 over an original 128 positions, so the ramp
        # spans dimensions 0 to 3 of 16 and the attention factor is 1.1386), the sliding ones
        # plain at a base of their own.
        common.update(num_hidden_layers=3, max_position_embeddings=512)
        return transformers.Olmo3Config(
            sliding_window=6, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={
                "full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10_000.0,
                                   "original_max_position_embeddings": 128},
                "sliding_attention": {"rope_type": "default", "rope_theta": 500_000.0}},
            pad_token_id=0, **common)
    if family in ("gpt_oss", "gpt_oss-mxfp4"):
        # GPT-OSS: attention with random biases on all four projections and a sink logit per
        # head (below), a sliding layer then a full one (window 5 < 16 ids), YaRN ×4 over 32
        # positions without truncation, four experts 64 wide of which each token takes two,
        # with random biases (below), the router's too, and the clamped GLU at a limit of 1.5
        # and a gain of 1.3 (so that both bite and are read from the config). `gpt_oss-mxfp4`
        # holds its experts as the released checkpoints do, in MXFP4 (below).
        common.update(intermediate_size=64)
        return transformers.GptOssConfig(
            num_local_experts=4, num_experts_per_tok=2, sliding_window=5, swiglu_limit=1.5,
            swiglu_alpha=1.3, head_dim=16, attention_bias=True, pad_token_id=0,
            rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "truncate": False, "rope_theta": 150_000.0,
                             "original_max_position_embeddings": 32},
            **common)
    if family in ("glm4_moe", "glm4_moe-16e"):
        # GLM-4.5: q/k/v biases (random, below), per-head q/k norms, RoPE on the first half of
        # each head (its halves rotating), a dense first layer (112 wide) and then two layers
        # of eight experts 48 wide in four groups of two, of which each token takes two from
        # the best two groups by the biased sigmoid choice (random correction biases, below),
        # renormalised and x2.5, beside a shared expert 2 x 48 wide added ungated. The `-16e`
        # variant: sixteen experts in the same four groups, so that expert pruning can take one
        # from every group and leave the router the two a group it needs.
        common.update(num_hidden_layers=3)
        return transformers.Glm4MoeConfig(
            n_routed_experts=16 if family.endswith("-16e") else 8, num_experts_per_tok=2, moe_intermediate_size=48,
            n_shared_experts=2, n_group=4, topk_group=2, routed_scaling_factor=2.5,
            first_k_dense_replace=1, norm_topk_prob=True, use_qk_norm=True, attention_bias=True,
            head_dim=16, partial_rotary_factor=0.5, pad_token_id=0, **common)
    if family in ("deepseek_v2", "deepseek_v3", "deepseek_v3-fp8", "deepseek_v2-16e",
                  "deepseek_v3-16e"):
        # DeepSeek's multi-head latent attention: keys and values from a 32-wide latent (normed,
        # then kv_b_proj), each head's query and key 16 dimensions without position and 8
        # rotated (one key head of them shared), values 12 wide; YaRN whose mscale_all_dim
        # scales the softmax. A dense first layer (112 wide), then eight experts 48 wide in four
        # groups of two, two a token, x2.5, beside a shared expert
        # 2 x 48 wide added ungated.
        # V2 (V2-Lite's layout): q_proj, softmax routing (group_limited_greedy: from the one
        # group with the best probability; never renormalised), complex (neighbour-pair)
        # rotation.
        # V3: queries through a 24-wide latent (q_a_proj, q_a_layernorm, q_b_proj), biases on
        # q_a/kv_a/o (attention_bias), sigmoid routing with correction biases, renormalised,
        # interleaved rotation (rope_interleave), YaRN's cosines scaled too (mscale != mscale_all_dim).
        # The `-16e` variants: sixteen experts in the same four groups (four a group), so that
        # expert pruning can take the same number from every group and leave V3's router the
        # two a group it needs (its group score is the sum of a group's top two).
        common.update(num_hidden_layers=3, num_key_value_heads=4)
        mla = dict(kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12,
                   n_routed_experts=16 if family.endswith("-16e") else 8,
                   num_experts_per_tok=2, moe_intermediate_size=48,
                   n_shared_experts=2, n_group=4, routed_scaling_factor=2.5,
                   first_k_dense_replace=1, pad_token_id=0)
        yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                "beta_fast": 32.0, "beta_slow": 1.0, "rope_theta": 10_000.0}
        if family.startswith("deepseek_v2"):
            return transformers.DeepseekV2Config(
                q_lora_rank=None, topk_method="group_limited_greedy", norm_topk_prob=False,
                topk_group=1,
                rope_parameters={**yarn, "mscale": 0.707, "mscale_all_dim": 0.707},
                **mla, **common)
        return transformers.DeepseekV3Config(
            q_lora_rank=24, topk_group=2, norm_topk_prob=True, attention_bias=True, rope_interleave=True,
            rope_parameters={**yarn, "mscale": 1.0, "mscale_all_dim": 0.8}, **mla, **common)
    if family == "llama4":
        # Llama 4: four layers, the fourth NoPE (no_rope_layer_interval 4); the three rotating
        # ones pair neighbours under a llama3-scaled RoPE (all three bands: 8 < wavelengths < 32
        # interpolated), scale queries and keys to unit RMS after it and attend within chunks of
        # 6 (16 ids: three chunks); the NoPE one attends in full with a query temperature from
        # position 3 on (floor_scale 4, attn_scale 0.5). Biases on all four attention projections
        # (random, below). Layers 1 and 3 have four experts 48 wide (interleave_moe_layer_step 2),
        # two a token by sigmoid of the top logits scaling their input, beside a shared expert 48
        # wide; layers 0 and 2 one MLP 112 wide (intermediate_size_mlp).
        common.update(num_hidden_layers=4, intermediate_size=48)
        return transformers.Llama4TextConfig(
            intermediate_size_mlp=112, num_local_experts=4, num_experts_per_tok=2,
            interleave_moe_layer_step=2, attention_chunk_size=6, floor_scale=4, attn_scale=0.5,
            head_dim=16, use_qk_norm=True, attention_bias=True, pad_token_id=0,
            rope_parameters={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
                             "rope_theta": 10_000.0},
            **common)
    raise SystemExit(f"unknown family {family}")


def tokenizer_json():
    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, VOCAB)}}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}],
            "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
            "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}


def mxfp4_experts(model):
    """Random MXFP4 experts: each layer's gate_up_proj and down_proj drawn as blocks of E2M1
    nibbles with E8M0 scales of 2^-5 to 2^-2, held in `model.mxfp4` and set into the model as
    transformers dequantises them (`convert_moe_packed_tensors`), so the logits are those of the
    dequantised checkpoint."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    model.mxfp4 = {}
    for i, layer in enumerate(model.model.layers):
        experts = layer.mlp.experts
        for proj in ("gate_up_proj", "down_proj"):
            param = getattr(experts, proj)
            count, cols, rows = param.shape  # [experts, in, out]: blocks are [experts, out, in / 32, 16]
            blocks = torch.randint(0, 256, (count, rows, cols // 32, 16), dtype=torch.uint8)
            scales = torch.randint(122, 126, (count, rows, cols // 32), dtype=torch.uint8)
            with torch.no_grad():
                param.copy_(convert_moe_packed_tensors(blocks, scales, dtype=torch.float32))
            model.mxfp4[f"model.layers.{i}.mlp.experts.{proj}"] = (blocks, scales)


def fp8_blocks(w):
    """`w` (a matrix) as E4M3 values and the f32 scale of each 128 x 128 block (its largest
    magnitude over 448), as DeepSeek's FP8 checkpoints hold it; returns (values, scales,
    values x scales in f32)."""
    rows, cols = w.shape
    br, bc = -(-rows // 128), -(-cols // 128)
    scales = torch.zeros(br, bc)
    for i in range(br):
        for j in range(bc):
            block = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            scales[i, j] = block.abs().max().clamp(min=1e-12) / 448.0
    expanded = scales.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
    values = (w / expanded).to(torch.float8_e4m3fn)
    return values, scales, values.float() * expanded


def fp8_layers(model):
    """Every linear of every layer but the router quantised to block-scaled FP8 in place (the
    experts' 3-D stacks as the checkpoint's per-expert matrices), kept in `model.fp8` by the
    saved checkpoint's names, so the logits are those of the dequantised checkpoint."""
    model.fp8 = {}
    for i, layer in enumerate(model.model.layers):
        for name, p in layer.named_parameters():
            saved = f"model.layers.{i}.{name}"
            if p.dim() == 2 and "norm" not in name and name != "mlp.gate.weight":
                values, scales, p.data = fp8_blocks(p.data)
                model.fp8[saved] = (values, scales)
            elif name == "mlp.experts.gate_up_proj":
                inter = p.shape[1] // 2
                for e in range(p.shape[0]):
                    for proj, rows in (("gate_proj", slice(0, inter)), ("up_proj", slice(inter, None))):
                        values, scales, p.data[e, rows] = fp8_blocks(p.data[e, rows])
                        model.fp8[f"model.layers.{i}.mlp.experts.{e}.{proj}.weight"] = (values, scales)
            elif name == "mlp.experts.down_proj":
                for e in range(p.shape[0]):
                    values, scales, p.data[e] = fp8_blocks(p.data[e])
                    model.fp8[f"model.layers.{i}.mlp.experts.{e}.down_proj.weight"] = (values, scales)


def store_fp8(model, out):
    """Rewrites the saved checkpoint with each quantised weight as its E4M3 values and
    `weight_scale_inv`, and the config's `quantization_config` as DeepSeek-V3's."""
    from safetensors.torch import load_file, save_file
    path = f"{out}/model.safetensors"
    tensors = load_file(path)
    for name, (values, scales) in model.fp8.items():
        assert name in tensors, name
        tensors[name] = values
        tensors[f"{name}_scale_inv"] = scales
    save_file(tensors, path, metadata={"format": "pt"})
    with open(f"{out}/config.json") as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                  "quant_method": "fp8", "weight_block_size": [128, 128]}
    with open(f"{out}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)


def store_mxfp4(model, out):
    """Rewrites the saved checkpoint with each expert stack as MXFP4 `_blocks` and `_scales`
    in place of its f32 values, and the config's `quantization_config` as the hub's."""
    from safetensors.torch import load_file, save_file
    path = f"{out}/model.safetensors"
    tensors = load_file(path)
    for name, (blocks, scales) in model.mxfp4.items():
        del tensors[name]
        tensors[f"{name}_blocks"] = blocks
        tensors[f"{name}_scales"] = scales
    save_file(tensors, path, metadata={"format": "pt"})
    with open(f"{out}/config.json") as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
        "quant_method": "mxfp4"}
    with open(f"{out}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)


def main():
    family, out = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config(family)).eval()
    # Non-unit norm gains, so a norm left out or misplaced shows in the logits; for OPT and
    # GPT-NeoX and BLOOM, which initialise every bias to zero, non-zero biases too.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "ln_f.weight", "ln_attn.weight", "ln_mlp.weight", "ln_1.weight", "ln_2.weight")):
                p.uniform_(0.5, 1.5)
            elif family.startswith(("opt", "gpt_neox", "bloom", "falcon", "phi", "stablelm", "granite", "glm", "cohere", "qwen2_moe", "starcoder2", "gptj", "nemotron", "gpt", "arcee", "ernie", "deepseek_v3", "llama4")) and name.endswith((".bias", "_bias")):
                p.uniform_(-0.5, 0.5)
            elif name.endswith("self_attn.sinks"):
                # Sinks of the scores' size, so that each takes a visible share of its softmax.
                p.uniform_(0.0, 2.0)
        if model.config.model_type in ("glm4_moe", "deepseek_v2", "deepseek_v3"):
            # Routers whose logits spread (transformers draws them at 0.02), and correction
            # biases of the sigmoid scores' size, so that both decide which experts are chosen.
            for layer in model.model.layers[model.config.first_k_dense_replace:]:
                layer.mlp.gate.weight.normal_(0.0, 0.5)
                if hasattr(layer.mlp.gate, "e_score_correction_bias"):
                    layer.mlp.gate.e_score_correction_bias.uniform_(-0.3, 0.3)
    if family == "gpt_oss-mxfp4":
        mxfp4_experts(model)
    if family == "deepseek_v3-fp8":
        fp8_layers(model)
    model.save_pretrained(out, safe_serialization=True)
    if family == "gpt_oss-mxfp4":
        store_mxfp4(model, out)
    if family == "deepseek_v3-fp8":
        store_fp8(model, out)
    with open(f"{out}/tokenizer.json", "w") as f:
        json.dump(tokenizer_json(), f)
    with torch.no_grad():
        logits = model(torch.tensor([IDS])).logits[0]
        # Each cap must show in the logits, or the fixture could not catch it left out.
        final_cap = getattr(model.config, "final_logit_softcapping", None)
        if final_cap:
            model.config.final_logit_softcapping = None
            moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
            print("without the final soft-cap the logits move by", moved)
            model.config.final_logit_softcapping = final_cap
        # Each NoPE layer must show in the logits, or the fixture could not catch it rotated.
        if getattr(model.config, "no_rope_layers", None):
            for layer in model.model.layers:
                layer.self_attn.use_rope = 1
            moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
            print("rotating the NoPE layers moves the logits by", moved)
            for layer, flag in zip(model.model.layers, model.config.no_rope_layers):
                layer.self_attn.use_rope = flag
        # Interleaved pairs must show in the logits: rotating halves instead moves them.
        if getattr(model.config, "clip_qkv", None):
            clip = model.config.clip_qkv
            model.config.clip_qkv = None
            moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
            model.config.clip_qkv = clip
            print("without the q/k/v clamp the logits move by", moved)
        if family.startswith(("glm", "cohere", "ernie")) and family != "glm4_moe":
            module = sys.modules[type(model).__module__]
            interleaved = module.rotate_half
            def halves(x):
                x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
                return torch.cat((-x2, x1), dim=-1)
            module.rotate_half = halves
            moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
            module.rotate_half = interleaved
            print("rotating halves instead of neighbours moves the logits by", moved)
        if family.startswith("granite"):
            base = model.model
            for what, undo, redo in [
                ("embedding", lambda: setattr(base, "embedding_multiplier", 1.0),
                 lambda: setattr(base, "embedding_multiplier", 3.0)),
                ("residual", lambda: [setattr(l, "residual_multiplier", 1.0) for l in base.layers],
                 lambda: [setattr(l, "residual_multiplier", 0.4) for l in base.layers]),
                ("attention", lambda: [setattr(l.self_attn, "scaling", 16 ** -0.5) for l in base.layers],
                 lambda: [setattr(l.self_attn, "scaling", 0.1) for l in base.layers]),
                ("logits", lambda: setattr(model.config, "logits_scaling", 1.0),
                 lambda: setattr(model.config, "logits_scaling", 2.5))]:
                undo()
                moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
                redo()
                print(f"without the {what} factor the logits move by", moved)
        if model.config.model_type == "gpt_oss":
            for what, undo, redo in [
                ("sinks", lambda: [l.self_attn.sinks.data.fill_(-1e9) for l in model.model.layers], None),
                ("GLU clamp", lambda: [setattr(l.mlp.experts, "limit", 1e9) for l in model.model.layers],
                 lambda: [setattr(l.mlp.experts, "limit", model.config.swiglu_limit) for l in model.model.layers]),
                ("window", lambda: setattr(model.config, "sliding_window", 1000),
                 lambda: setattr(model.config, "sliding_window", 5))]:
                saved = {k: v.clone() for k, v in model.state_dict().items()}
                undo()
                moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
                model.load_state_dict(saved)
                if redo:
                    redo()
                print(f"without the {what} the logits move by", moved)
        if model.config.model_type == "glm4_moe":
            moe_layers = model.model.layers[model.config.first_k_dense_replace:]
            for what, undo in [
                ("correction biases", lambda: [l.mlp.gate.e_score_correction_bias.zero_() for l in moe_layers]),
                ("groups", lambda: [setattr(l.mlp.gate, "topk_group", 4) for l in moe_layers]),
                ("routing scale", lambda: [setattr(l.mlp.gate, "routed_scaling_factor", 1.0) for l in moe_layers])]:
                saved = {k: v.clone() for k, v in model.state_dict().items()}
                routers = [(l.mlp.gate.topk_group, l.mlp.gate.routed_scaling_factor) for l in moe_layers]
                undo()
                moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
                model.load_state_dict(saved)
                for l, (open_groups, scale) in zip(moe_layers, routers):
                    l.mlp.gate.topk_group, l.mlp.gate.routed_scaling_factor = open_groups, scale
                print(f"without the {what} the logits move by", moved)
        if model.config.model_type == "llama4_text":
            attns = [l.self_attn for l in model.model.layers]
            norms = [getattr(a, "qk_norm", None) for a in attns]
            for what, undo, redo in [
                ("chunks", lambda: setattr(model.config, "attention_chunk_size", 1000),
                 lambda: setattr(model.config, "attention_chunk_size", 6)),
                ("query temperature", lambda: [setattr(a, "attn_temperature_tuning", False) for a in attns],
                 lambda: [setattr(a, "attn_temperature_tuning", True) for a in attns]),
                ("unit q/k norm", lambda: [delattr(a, "qk_norm") for a in attns if hasattr(a, "qk_norm")],
                 lambda: [setattr(a, "qk_norm", n) for a, n in zip(attns, norms) if n is not None])]:
                undo()
                moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
                redo()
                print(f"without the {what} the logits move by", moved)
            again = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
            assert again == 0.0, again
        if model.config.model_type in ("deepseek_v2", "deepseek_v3"):
            attns = [l.self_attn for l in model.model.layers]
            scalings = [a.scaling for a in attns]
            for a in attns:
                a.scaling = a.qk_head_dim ** -0.5
            moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
            for a, scaling in zip(attns, scalings):
                a.scaling = scaling
            print("without mscale_all_dim's softmax factor the logits move by", moved)
            gates = [l.mlp.gate for l in model.model.layers[model.config.first_k_dense_replace:]]
            saved = [(g.topk_group, g.routed_scaling_factor) for g in gates]
            for what, undo in [("groups", lambda g: setattr(g, "topk_group", 4)),
                               ("routing scale", lambda g: setattr(g, "routed_scaling_factor", 1.0))]:
                for g in gates:
                    undo(g)
                moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
                for g, (open_groups, scale) in zip(gates, saved):
                    g.topk_group, g.routed_scaling_factor = open_groups, scale
                print(f"without the {what} the logits move by", moved)
        if model.config.model_type == "deepseek_v3":
            model.config.rope_interleave = False
            moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
            model.config.rope_interleave = True
            print("rotating halves instead of neighbours moves the logits by", moved)
        if getattr(model.config, "attn_logit_softcapping", None):
            for layer in model.model.layers:
                layer.self_attn.attn_logit_softcapping = None
            moved = float((model(torch.tensor([IDS])).logits[0] - logits).abs().max())
            print("without the attention soft-cap the logits move by", moved)
        if family == "granitemoehybrid-moe":
            rotating = transformers.GraniteMoeHybridForCausalLM(
                config(family).__class__(**{**model.config.to_dict(), "position_embedding_type": "rope"})).eval()
            rotating.load_state_dict(model.state_dict())
            moved = float((rotating(torch.tensor([IDS])).logits[0] - logits).abs().max())
            print("rotating the layers moves the logits by", moved)
        if model.config.model_type.startswith("granitemoe"):
            # Every expert must see tokens, or a fixture could not catch one misread.
            routers = [l.block_sparse_moe.router for l in model.model.layers
                       if getattr(l, "block_sparse_moe", None) is not None]
            for r in routers:
                x = model.model.embed_tokens(torch.tensor(IDS)) * model.config.embedding_multiplier
                print("tokens per expert (first layer's inputs):",
                      torch.bincount(r(x)[2].flatten(), minlength=r.num_experts).tolist())
                break
    with open(f"{out}/logits.json", "w") as f:
        json.dump({"ids": IDS, "logits": [[round(v, 7) for v in row] for row in logits.tolist()],
                   "transformers": transformers.__version__, "torch": torch.__version__}, f)
    print(out, "written; max |logit|", float(logits.abs().max()))


if __name__ == "__main__":
    main()
