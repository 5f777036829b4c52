#!/usr/bin/env python3
"""Compares wanda's native zero-shot scores with lm-evaluation-harness's, document by document.

Inputs: the JSON `scripts/zeroshot-reference.py` writes (lm-eval's `hf` model on local task
data), and wanda's `eval --zeroshot ... --json` output plus its `--log-samples` file on the same
data. Prints a Markdown table: per task, whether every request (context, continuation) is the
same, the largest relative difference of a loglikelihood, acc and acc_norm from both, and
documents per second from both (wanda's scoring time against lm-eval's per-task time).

    python3 scripts/zeroshot-compare.py --reference ref.json --wanda-json ours.json \
        --wanda-samples ours.jsonl

Standard library only.
"""

import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", required=True, help="zeroshot-reference.py output")
    ap.add_argument("--wanda-json", required=True, help="`wanda eval --zeroshot ... --json` output")
    ap.add_argument("--wanda-samples", required=True, help="`wanda eval --log-samples` file")
    args = ap.parse_args()

    ref = json.load(open(args.reference))
    ours = json.load(open(args.wanda_json))["zeroshot"]
    samples = {}
    for line in open(args.wanda_samples):
        s = json.loads(line)
        samples[(s["task"], s["doc_id"])] = s

    print("| task | docs | requests identical | max rel. Δ loglik | acc lm-eval / wanda "
          "| acc_norm lm-eval / wanda | docs/s lm-eval / wanda |")
    print("|---|---:|---|---:|---|---|---|")
    for task, t in ref["tasks"].items():
        worst, same = 0.0, True
        for d in t["docs"]:
            s = samples[(task, d["doc_id"])]
            same &= [list(r) for r in d["requests"]] == [list(r) for r in s["requests"]]
            for a, b in zip(d["lls"], s["loglikelihoods"]):
                worst = max(worst, abs(a - b) / max(abs(a), 1e-12))
        w = ours[task]

        def pair(key):
            a, b = t.get(key), w.get(key)
            if a is None and b is None:
                return "—"
            return f"{a:.4f} / {b:.4f}" + ("" if a == b else " ≠")

        ref_rate = len(t["docs"]) / t["seconds"]
        print(f"| {task} | {len(t['docs'])} | {'yes' if same else 'NO'} | {worst:.1e} "
              f"| {pair('acc')} | {pair('acc_norm')} "
              f"| {ref_rate:.2f} / {ours['documents_per_second'][task]:.2f} |")


if __name__ == "__main__":
    main()
