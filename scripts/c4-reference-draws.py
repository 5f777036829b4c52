#!/usr/bin/env python3
"""Transcribes the reference Wanda C4 calibration sampler: locuslab/wanda, lib/data.py, get_c4()
(itself adapted from IST-DASLab/sparsegpt, datautils.py). Same Python `random` calls in the same
order, so the documents, window offsets and number of rejected draws are the reference's.

Differences that do not change the result: the shards are read with gzip + json line by line (the
row order `load_dataset('json')` gives); token ids are Python lists instead of torch tensors
(`tokenizer(text).input_ids` holds the same ids as `tokenizer(text, return_tensors='pt').input_ids[0]`).
Prints one JSON object: the accepted document per sample, its window start, the number of document
draws, the first 4 ids of each window, and facts about the validation encoding.

    ~/.cache/wanda-ab-venv/bin/python scripts/c4-reference-draws.py \\
        --train tests/fixtures/data/c4/en/c4-train.00000-of-01024.json.gz \\
        --validation tests/fixtures/data/c4/en/c4-validation.00000-of-00008.json.gz \\
        --tokenizer ../shared/models/smollm2-135m-hf --nsamples 8 --seqlen 256 --seed 0 --json
"""
import argparse, gzip, hashlib, json, random

from transformers import AutoTokenizer


def read(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def get_c4(nsamples, seed, seqlen, tokenizer, traindata, valdata):
    random.seed(seed)
    documents, offsets, first_ids, draws = [], [], [], 0
    for _ in range(nsamples):
        while True:
            i = random.randint(0, len(traindata) - 1)
            draws += 1
            ids = tokenizer(traindata[i]).input_ids
            if len(ids) > seqlen:
                break
        documents.append(i)
        i = random.randint(0, len(ids) - seqlen - 1)
        offsets.append(i)
        first_ids.append(ids[i:i + seqlen][:4])
    joined = " ".join(valdata[:1100])
    valenc = tokenizer(joined).input_ids[:(256 * seqlen)]
    return {"documents": documents, "offsets": offsets, "draws": draws, "first_ids": first_ids,
            "validation_tokens": len(valenc), "validation_head": valenc[:8],
            "validation_sha256_of_joined_text": hashlib.sha256(joined.encode("utf-8")).hexdigest()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train", required=True)
    p.add_argument("--validation", required=True)
    p.add_argument("--tokenizer", required=True, help="folder with tokenizer.json (AutoTokenizer)")
    p.add_argument("--nsamples", type=int, default=128)
    p.add_argument("--seqlen", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="one compact line instead of indented JSON")
    a = p.parse_args()
    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    out = get_c4(a.nsamples, a.seed, a.seqlen, tok, read(a.train), read(a.validation))
    print(json.dumps(out) if a.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
