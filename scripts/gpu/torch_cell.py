# One wanda cell on the GPU the way the Wanda reference code does it (locuslab/wanda
# `lib/prune.py: prepare_calibration_input, prune_wanda`, `lib/layerwrapper.py: WrappedGPT`,
# `lib/eval.py: eval_ppl_wikitext`): calibration windows drawn as `wanda prune` draws them
# (`random.seed(seed)`, `randint(0, n - seqlen - 1)`), layer-0 inputs caught on the device, per
# layer the seven linears' `scaler_row` accumulated in f32 by forward hooks while every sample runs
# through the layer one at a time, each linear pruned by |W|·sqrt(scaler_row) (lowest per output
# row), the samples run again through the pruned layer; then perplexity over consecutive windows.
# Prints one JSON line: load/prune/eval seconds, perplexity, the device's peak reserved memory.
#   python3 torch_cell.py FOLDER CALIB_TEXT EVAL_TEXT NSAMPLES SEQLEN WINDOWS DTYPE [SPARSITY]
import json, math, random, sys, time
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

folder, calib, evalt = sys.argv[1:4]
nsamples, seqlen, windows = map(int, sys.argv[4:7])
dtype = getattr(torch, sys.argv[7])
ratio = float(sys.argv[8]) if len(sys.argv) > 8 else 0.5
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
tok = Tokenizer.from_file(f"{folder}/tokenizer.json")
dev = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU only to try the script out

def sync():
    if dev == "cuda":
        torch.cuda.synchronize()
    return time.time()

t0 = sync()
model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(dev).eval()
model.config.use_cache = False
load_s = sync() - t0

t0 = sync()
ids = torch.tensor(tok.encode(open(calib).read()).ids)
random.seed(0)
offsets = [random.randint(0, len(ids) - seqlen - 1) for _ in range(nsamples)]
layers = model.model.layers
inps = torch.zeros((nsamples, seqlen, model.config.hidden_size), dtype=dtype, device=dev)
kwargs = {}

class Catcher(torch.nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module, self.i = module, 0
    def forward(self, x, **kw):
        inps[self.i] = x[0]
        self.i += 1
        kwargs.update(kw)
        raise ValueError

layers[0] = Catcher(layers[0])
with torch.no_grad():
    for o in offsets:
        try:
            model(ids[o:o + seqlen][None].to(dev))
        except ValueError:
            pass
layers[0] = layers[0].module
outs = torch.zeros_like(inps)
NAMES = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]

def run(layer, x):
    out = layer(x.unsqueeze(0), **kwargs)
    return (out[0] if isinstance(out, tuple) else out)[0]

with torch.no_grad():
    for layer in layers:
        scaler, count = {}, {}
        def hook(name):
            def add(_m, inp, _out):
                x = inp[0].reshape(-1, inp[0].shape[-1]).t().float()
                n = count.get(name, 0)
                s = scaler.get(name, torch.zeros(x.shape[0], device=dev))
                s *= n / (n + 1)
                count[name] = n + 1
                scaler[name] = s + torch.norm(x, p=2, dim=1) ** 2 / (n + 1)
            return add
        handles = [layer.get_submodule(n).register_forward_hook(hook(n)) for n in NAMES]
        for j in range(nsamples):
            outs[j] = run(layer, inps[j])
        for h in handles:
            h.remove()
        for n in NAMES:
            w = layer.get_submodule(n).weight.data
            metric = torch.abs(w) * torch.sqrt(scaler[n].reshape(1, -1))
            order = torch.sort(metric, dim=-1, stable=True)[1]
            mask = torch.zeros_like(metric, dtype=torch.bool)
            mask.scatter_(1, order[:, :int(metric.shape[1] * ratio)], True)
            w[mask] = 0
        for j in range(nsamples):
            outs[j] = run(layer, inps[j])
        inps, outs = outs, inps
prune_s = sync() - t0

t0 = sync()
test = tok.encode(open(evalt).read()).ids
nll = 0.0
with torch.no_grad():
    for w in range(windows):
        x = torch.tensor(test[w * seqlen:(w + 1) * seqlen], device=dev)[None]
        logits = model(x).logits.float()
        nll += F.cross_entropy(logits[0, :-1], x[0, 1:], reduction="sum").item()
eval_s = sync() - t0
print(json.dumps({"torch": str(dtype), "folder": folder, "nsamples": nsamples, "seqlen": seqlen,
                  "windows": windows, "load_s": load_s, "prune_s": prune_s, "eval_s": eval_s,
                  "perplexity": math.exp(nll / (windows * (seqlen - 1))),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved() if dev == "cuda" else None}))
