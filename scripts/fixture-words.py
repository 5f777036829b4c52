#!/usr/bin/env python3
"""Calibration and evaluation text in the tiny fixture models' vocabulary.

The fixtures of scripts/make-family-fixture.py have a word-level tokenizer that knows only
`[UNK]` (0) and `w1` ... `w95`; real text is all `[UNK]` to it, so every token routes the same
way and every expert of a mixture ties. This maps the words of WikiText-2 onto `w1` ... `w95`
deterministically, keeping the text's word statistics:

- words are whitespace-separated WikiText tokens, lowercased (punctuation such as `,` `.` `@-@`
  and `<unk>` are words too);
- the 63 most frequent words of the calibration source (ties broken alphabetically) get
  `w1` ... `w63` by rank, so the frequent words stay distinct and the ids keep a Zipf-like
  distribution;
- every other word goes to `w64` ... `w95` by a stable hash (the first 4 bytes of its SHA-256,
  big-endian, mod 32), never Python's randomised `hash`.

The same mapping (ranked on the calibration source) is applied to both texts. Output: words
separated by single spaces, 20 words a line.

    ~/.cache/wanda-ab-venv/bin/python scripts/fixture-words.py \
        [--data /work/shared/data/wikitext-2] [--out tests/fixtures/data/fixture-words]

writes `calib.txt` (the first 30,000 words of wikitext2-v1-valid.txt) and `eval.txt` (the first
6,000 words of wikitext2-v1-test.txt).
"""
import argparse
import collections
import hashlib
import os

VOCAB_WORDS = 95  # w1 ... w95
RANKED = 63  # w1 ... w63 by frequency rank; w64 ... w95 by hash
PER_LINE = 20


def words_of(path):
    with open(path, encoding="utf-8") as f:
        return [w.lower() for w in f.read().split()]


def mapping(source_words):
    counts = collections.Counter(source_words)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:RANKED]
    table = {w: f"w{i + 1}" for i, (w, _) in enumerate(ranked)}
    hashed = VOCAB_WORDS - RANKED

    def word(w):
        if w in table:
            return table[w]
        h = int.from_bytes(hashlib.sha256(w.encode("utf-8")).digest()[:4], "big")
        return f"w{RANKED + 1 + h % hashed}"

    return word


def write(path, words):
    lines = [" ".join(words[i:i + PER_LINE]) for i in range(0, len(words), PER_LINE)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/work/shared/data/wikitext-2")
    p.add_argument("--out", default="tests/fixtures/data/fixture-words")
    p.add_argument("--calib-words", type=int, default=30_000)
    p.add_argument("--eval-words", type=int, default=6_000)
    a = p.parse_args()
    calib_src = words_of(os.path.join(a.data, "wikitext2-v1-valid.txt"))
    eval_src = words_of(os.path.join(a.data, "wikitext2-v1-test.txt"))
    word = mapping(calib_src)
    os.makedirs(a.out, exist_ok=True)
    for name, src, n in (("calib.txt", calib_src, a.calib_words), ("eval.txt", eval_src, a.eval_words)):
        mapped = [word(w) for w in src[:n]]
        write(os.path.join(a.out, name), mapped)
        counts = collections.Counter(mapped)
        top = counts.most_common(5)
        print(f"{name}: {len(mapped)} words, {len(counts)} distinct ids, top {top}, "
              f"least {counts.most_common()[-1]}")


if __name__ == "__main__":
    main()
