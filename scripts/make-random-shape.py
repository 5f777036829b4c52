#!/usr/bin/env python3
"""A checkpoint of a real model's shape with random weights (transformers' initialisation, small
random biases), saved as f32 safetensors with a tokenizer.json copied beside it (its ids must stay
below the vocabulary; SmolLM2's 49152 and the fixtures' word vocabulary do). Used to check a family
at its real shape against scripts/torch-wanda-cell.py --hf-model, for speed and memory; its
perplexity is meaningless.

    ~/.cache/wanda-ab-venv/bin/python scripts/make-random-shape.py SHAPE OUT_DIR TOKENIZER_JSON

SHAPE: opt-125m (768 wide, 12 layers, ffn 3072, vocabulary 50272), pythia-160m (768 wide, 12
layers of 12 heads with 16 of 64 dimensions rotating, parallel residual, vocabulary 50304),
bloom-560m (1024 wide, 24 layers of 16 heads, ALiBi, vocabulary 250880) or falcon-7b-4l
(Falcon-7B's layer, 4544 wide with 71 query heads sharing one kv head, 18176 MLP, vocabulary
65024, but 4 of its 32 layers, so that f32 fits a 24 GiB machine), phi-2-8l (Phi-2's layer, 2560
wide, 32 heads with 32 of 80 dimensions rotating, 10240 MLP, a biased LM head over 51200 entries,
8 of its 32 layers) or gemma-2b-6l (Gemma 2B's layer, 2048 wide, 8 query heads of 256 sharing one
kv head, 16384 GeGLU, a tied 256000-entry vocabulary, 6 of its 18 layers) or olmo2-1b-8l
(OLMo-2 1B's layer, 2048 wide, 16 heads with q/k norms across them, 8192 SwiGLU, output norms
alone, an untied 100352-entry vocabulary, 8 of its 16 layers) or gpt-oss-20b-2l (gpt-oss-20b's
layer, 2880 wide, 64 query heads of 64 sharing 8 kv heads with biases and sinks, a sliding then a
full layer, 32 experts 2880 wide with biases of which 4 a token, an untied 201088-entry
vocabulary, 2 of its 24 layers, unquantised) or llama4-scout-1l (Llama 4 Scout's layer, 5120
wide, 40 query heads of 128 sharing 8 kv heads, chunked attention with unit-RMS q/k after its
llama3-scaled RoPE, 16 experts 8192 wide of which 1 a token beside a shared expert, 1 of its 48
layers, and a 49,152-entry vocabulary in place of its 202,048, so that f32 fits beside PyTorch's
copy) or granite-1b-a400m-8l (granite-3.1-1b-a400m's layer and factors, 1024 wide, 16 query
heads sharing 8 kv heads, 32 experts 512 wide stacked, 8 a token, a tied 49155-entry vocabulary,
8 of its 24 layers) or qwen3-30b-a3b-2l (Qwen3-30B-A3B's layer, 2048 wide, 32 query heads of 128
sharing 4 kv heads with q/k norms, 128 experts 768 wide of which 8 a token, renormalised, 2 of its
48 layers, and a 49,152-entry vocabulary in place of its 151,936).
"""
import shutil
import sys

import torch
import transformers

SHAPES = {
    "opt-125m": lambda: transformers.OPTConfig(vocab_size=50272),
    "pythia-160m": lambda: transformers.GPTNeoXConfig(
        vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, rotary_pct=0.25, max_position_embeddings=2048,
        use_parallel_residual=True, tie_word_embeddings=False),
    "bloom-560m": lambda: transformers.BloomConfig(
        vocab_size=250880, hidden_size=1024, n_layer=24, n_head=16),
    "phi-2-8l": lambda: transformers.PhiConfig(
        vocab_size=51200, hidden_size=2560, intermediate_size=10240, num_hidden_layers=8,
        num_attention_heads=32, partial_rotary_factor=0.4, tie_word_embeddings=False),
    "gemma-2b-6l": lambda: transformers.GemmaConfig(
        vocab_size=256000, hidden_size=2048, intermediate_size=16384, num_hidden_layers=6,
        num_attention_heads=8, num_key_value_heads=1, head_dim=256, hidden_act="gelu"),
    "olmo2-1b-8l": lambda: transformers.Olmo2Config(
        vocab_size=100352, hidden_size=2048, intermediate_size=8192, num_hidden_layers=8,
        num_attention_heads=16, num_key_value_heads=16, rope_theta=500_000.0,
        tie_word_embeddings=False),
    "gpt-oss-20b-2l": lambda: transformers.GptOssConfig(
        vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=2,
        num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=32,
        num_experts_per_tok=4, sliding_window=128, max_position_embeddings=131072),
    "llama4-scout-1l": lambda: transformers.Llama4TextConfig(
        vocab_size=49152, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
        num_hidden_layers=1, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
        num_local_experts=16, num_experts_per_tok=1, max_position_embeddings=10485760,
        rope_parameters={"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 1.0, "original_max_position_embeddings": 8192,
                         "rope_theta": 500_000.0}),
    "granite-1b-a400m-8l": lambda: transformers.GraniteMoeConfig(
        vocab_size=49155, hidden_size=1024, intermediate_size=512, num_hidden_layers=8,
        num_attention_heads=16, num_key_value_heads=8, num_local_experts=32,
        num_experts_per_tok=8, embedding_multiplier=12.0, residual_multiplier=0.22,
        attention_multiplier=0.015625, logits_scaling=6.0, tie_word_embeddings=True,
        max_position_embeddings=131072, rope_theta=10_000_000.0),
    "qwen3-30b-a3b-2l": lambda: transformers.Qwen3MoeConfig(
        vocab_size=49152, hidden_size=2048, num_hidden_layers=2, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, moe_intermediate_size=768, num_experts=128,
        num_experts_per_tok=8, norm_topk_prob=True, max_position_embeddings=40960,
        rope_theta=1_000_000.0, tie_word_embeddings=False),
    "falcon-7b-4l": lambda: transformers.FalconConfig(
        vocab_size=65024, hidden_size=4544, num_hidden_layers=4, num_attention_heads=71,
        multi_query=True, parallel_attn=True, bias=False),
}

shape, out, tokenizer = sys.argv[1], sys.argv[2], sys.argv[3]
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(SHAPES[shape]())
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith((".bias", "_bias")):
            p.uniform_(-0.02, 0.02)
model.eval().save_pretrained(out, safe_serialization=True)
shutil.copy(tokenizer, f"{out}/tokenizer.json")
print(out, sum(p.numel() for p in model.parameters()), "parameters")
