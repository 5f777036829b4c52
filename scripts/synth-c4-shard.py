#!/usr/bin/env python3
"""Writes a synthetic C4-like shard (gzip'd JSON lines, {"text","timestamp","url"}) of about the
given compressed size, for benchmarking how fast a reader indexes a real-sized shard (C4's
c4-train.00000-of-01024.json.gz is ~320 MB, ~356k documents). Texts are English-like: runs of 4 to
40 consecutive words from random places in ../shared/data/wikitext-2/wikitext2-v1-valid.txt, as
sentences and newline-separated paragraphs; 200 to 8,000 characters a document, log-uniform (mean
~2,100 characters, near C4's), so 300 MB holds about as many documents as the real shard (~370k).
Not a test fixture: the content is pseudo-random (fixed seed, reproducible) and only its size and
shape matter. Standard library only; about 0.3 s per MB on one core.

    python3 scripts/synth-c4-shard.py --out /tmp/c4-train.00000-of-01024.json.gz --mb 300
"""
import argparse, gzip, json, os, random, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "..", "shared", "data", "wikitext-2", "wikitext2-v1-valid.txt")


def words():
    with open(SOURCE, encoding="utf-8") as f:
        text = f.read().replace("<unk>", "thing").replace(" @-@ ", "-").replace(" @.@ ", ".")
    return [w for w in text.split() if w not in ("=", "@,@")]


def document(rng, ws):
    target, parts, size = int(200 * 40 ** rng.random()), [], 0  # log-uniform 200..8000, mean ~2,100 like C4
    while size < target:
        i = rng.randrange(len(ws) - 40)
        run = " ".join(ws[i:i + rng.randint(4, 40)])
        run = run[0].upper() + run[1:] + (". " if rng.random() < 0.8 else ".\n")
        parts.append(run)
        size += len(run)
    return "".join(parts)[:target].rstrip()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--mb", type=float, default=300, help="compressed size to reach, in MB (10^6 bytes)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rng, ws, goal, n, start = random.Random(a.seed), words(), int(a.mb * 1e6), 0, time.time()
    with open(a.out, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        while raw.tell() < goal:  # compressed bytes so far (lags by zlib's buffer, < 1 MB)
            lines = []
            for _ in range(200):
                row = {"text": document(rng, ws), "timestamp": "2019-04-25T12:57:54Z",
                       "url": f"https://example.com/synthetic/{n}/"}
                lines.append(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
                n += 1
            gz.write(("\n".join(lines) + "\n").encode("utf-8"))
    print(f"{a.out}: {n} documents, {os.path.getsize(a.out) / 1e6:.1f} MB, {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
