#!/usr/bin/env python3
"""An OPT-125m-shaped checkpoint with random weights (transformers' OPTConfig defaults: 768 wide,
12 layers, ffn 3072, 2048 positions; vocabulary 50272), small random biases, saved as safetensors
with a tokenizer.json copied beside it (its ids must stay below 50272; SmolLM2's 49152 do). Used
to check OPT at its real shape against scripts/torch-wanda-cell.py --hf-model and streamed; its
perplexity is meaningless.

    ~/.cache/wanda-ab-venv/bin/python scripts/make-opt-125m-shape.py OUT_DIR TOKENIZER_JSON
"""
import shutil
import sys

import torch
import transformers

out, tokenizer = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(transformers.OPTConfig(vocab_size=50272))
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith(".bias"):
            p.uniform_(-0.02, 0.02)
model.eval().save_pretrained(out, safe_serialization=True)
shutil.copy(tokenizer, f"{out}/tokenizer.json")
print(out, sum(p.numel() for p in model.parameters()), "parameters")
