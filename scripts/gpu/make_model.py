# A SmolLM2-135M-shaped Llama with random weights (std 0.1), saved as an f32 HF folder.
import shutil, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
src, dst = sys.argv[1], sys.argv[2]
cfg = LlamaConfig.from_pretrained(src)
cfg.initializer_range = 0.1
torch.manual_seed(0)
m = LlamaForCausalLM(cfg).to(torch.float32)
with torch.no_grad():
    for n, p in m.named_parameters():
        if n.endswith("norm.weight"):
            p.uniform_(0.5, 1.5)
m.save_pretrained(dst, safe_serialization=True)
for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]:
    shutil.copy(f"{src}/{f}", dst)
print("params", sum(p.numel() for p in m.parameters()))
