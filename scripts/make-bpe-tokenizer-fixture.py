#!/usr/bin/env python3
"""The slow-tokenizer fixture of `tests/it/tokenizer_files.rs`: a tiny OPT-style byte-level BPE
(`vocab.json`, `merges.txt`, OPT's `tokenizer_config.json` and `special_tokens_map.json`)
cut from SmolLM2's tokenizer (its 256 byte symbols and first MERGES merges, OPT's four special
tokens first), and `expected.json`: the ids transformers gives for TEXTS with that folder as it
is (OPT: BOS `</s>` first) and without its `tokenizer_config.json` (GPT-2's defaults: no BOS).

    ~/.cache/wanda-ab-venv/bin/python scripts/make-bpe-tokenizer-fixture.py \\
        ../shared/models/smollm2-135m-hf/tokenizer.json tests/fixtures/tokenizers/opt-style

With `--check-text FILE` it also compares, on the whole file, transformers' ids from SmolLM2's
full vocabulary and merges written as `vocab.json`/`merges.txt` with its `tokenizer.json` ids.
"""
import argparse, json, os, shutil, tempfile

import transformers

MERGES = 300
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
TEXTS = [
    " = Valkyria Chronicles III = \n",
    "Hello world, it's 2024: naïve café — ünïcödé!",
    "tabs\tand  double  spaces\n\nnew paragraph",
    "a special </s> inside and <pad> too",
    "",
]
OPT_CONFIG = {"tokenizer_class": "GPT2Tokenizer", "errors": "replace", "add_bos_token": True,
              "add_prefix_space": False, "bos_token": "</s>", "eos_token": "</s>",
              "unk_token": "</s>", "pad_token": "<pad>", "model_max_length": 2048}
OPT_SPECIALS = {"bos_token": "</s>", "eos_token": "</s>", "unk_token": "</s>", "pad_token": "<pad>"}


def merge_pairs(model):
    return [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]


def write_bpe(folder, vocab, merges):
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        f.writelines(f"{a} {b}\n" for a, b in merges)


def ids(folder, texts):
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    return [tok(t)["input_ids"] for t in texts]


p = argparse.ArgumentParser()
p.add_argument("tokenizer_json")
p.add_argument("out")
p.add_argument("--check-text")
a = p.parse_args()
model = json.load(open(a.tokenizer_json, encoding="utf-8"))["model"]
pairs = merge_pairs(model)[:MERGES]
byte_symbols = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])
                if len(t) == 1][:256]
vocab = {}
for t in SPECIALS + byte_symbols + [x + y for x, y in pairs]:
    vocab.setdefault(t, len(vocab))
os.makedirs(a.out, exist_ok=True)
write_bpe(a.out, vocab, pairs)
with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
    json.dump(OPT_CONFIG, f, indent=1)
with open(os.path.join(a.out, "special_tokens_map.json"), "w") as f:
    json.dump(OPT_SPECIALS, f, indent=1)
with tempfile.TemporaryDirectory() as gpt2:
    for name in ["vocab.json", "merges.txt"]:
        shutil.copy(os.path.join(a.out, name), gpt2)
    with open(os.path.join(gpt2, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer"}, f)
    expected = {"texts": TEXTS, "opt": ids(a.out, TEXTS), "gpt2": ids(gpt2, TEXTS),
                "transformers": transformers.__version__}
with open(os.path.join(a.out, "expected.json"), "w", encoding="utf-8") as f:
    json.dump(expected, f, ensure_ascii=False)
print(json.dumps({k: v for k, v in expected.items() if k != "texts"}))

if a.check_text:
    text = open(a.check_text, encoding="utf-8").read()
    with tempfile.TemporaryDirectory() as full:
        write_bpe(full, model["vocab"], merge_pairs(model))
        with open(os.path.join(full, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "GPT2Tokenizer"}, f)
        slow = ids(full, [text])[0]
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=a.tokenizer_json)(text)["input_ids"]
    first = next((i for i, (x, y) in enumerate(zip(slow, fast)) if x != y), None)
    print(json.dumps({"tokens": len(fast), "slow_tokens": len(slow), "identical": slow == fast,
                      "first_difference": first}))
