#!/usr/bin/env python3
"""Writes the small C4 fixture under tests/fixtures/data/c4/en/ in C4's real layout:

    c4-train.00000-of-01024.json.gz       150 documents, 100 to 6,000 characters
    c4-validation.00000-of-00008.json.gz  1,200 documents, 60 to 300 characters

Each line is one JSON object with C4's keys in C4's order: {"text":…,"timestamp":…,"url":…}.
Texts are paragraphs of ../shared/data/wikitext-2/wikitext2-v1-valid.txt (lightly detokenised),
lines joined by "\\n" as in C4. About a third of the train documents are long (1,500 to 6,000
characters, so some exceed 512 and 1,024 tokens) and the rest short or medium, so calibration
at seqlen 256/512 rejects documents. A few train documents carry non-ASCII text, quotes, a
backslash and a tab; half of those lines are written with \\uXXXX escapes (ensure_ascii, including
a surrogate pair) and half as raw UTF-8, to exercise a JSON reader both ways.

Deterministic: Python's `random` with a fixed seed, gzip with mtime=0 and no file name, so the
bytes are reproducible (given the same zlib). Standard library only.

    python3 scripts/make-c4-fixture.py          # prints the SHA-256 of both files
"""
import gzip, hashlib, io, json, os, random, re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "..", "shared", "data", "wikitext-2", "wikitext2-v1-valid.txt")
OUT = os.path.join(ROOT, "tests", "fixtures", "data", "c4", "en")
SEED = 20240501

# Text with JSON escapes and non-ASCII, spliced into a few train documents.
SPECIALS = [
    'She said "it\'s done" and left \u2014 caf\u00e9, na\u00efve, \u00fcber, stra\u00dfe.',
    "Path: C:\\Users\\wanda\\data \tcolumn\tafter a tab.",
    "Mixed scripts: \u4e2d\u6587\u6587\u672c, \u0440\u0443\u0441\u0441\u043a\u0438\u0439, "
    "\u65e5\u672c\u8a9e, emoji \U0001F600 \U0001F99E and \u201ccurly quotes\u201d.",
    'A "quoted \\ backslash" and a control-free \u00a0non-breaking space.',
]


def detok(s):
    """Undoes the most visible wikitext tokenisation so texts read like web text."""
    s = s.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".").replace("<unk>", "unk")
    s = re.sub(r" ([,.;:!?)'])", r"\1", s)
    return re.sub(r"\( ", "(", s).strip()


def paragraphs():
    with open(SOURCE, encoding="utf-8") as f:
        lines = [detok(l) for l in f if l.strip() and not l.strip().startswith("=")]
    return [l for l in lines if len(l) >= 40]


def document(rng, paras, lo, hi):
    """Consecutive paragraphs from a random start, joined by newlines, cut at a word boundary to a
    length drawn from [lo, hi]."""
    target = rng.randint(lo, hi)
    i, text = rng.randrange(len(paras)), ""
    while len(text) < target:
        text = (text + "\n" + paras[i % len(paras)]) if text else paras[i % len(paras)]
        i += 1
    cut = text.rfind(" ", 0, target + 1)
    text = text[:cut if cut >= lo else target].rstrip()
    assert lo <= len(text) <= hi, (lo, hi, len(text))
    return text


def record(rng, n, text, kind):
    stamp = "2019-%02d-%02dT%02d:%02d:%02dZ" % (rng.randint(1, 12), rng.randint(1, 28),
                                                rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59))
    slug = "-".join(re.findall(r"[a-z]+", text[:60].lower())[:5]) or "page"
    return {"text": text, "timestamp": stamp, "url": f"https://example.com/{kind}/{n}/{slug}/"}


def write(path, rows):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        for row, ascii_only in rows:
            line = json.dumps(row, ensure_ascii=ascii_only, separators=(",", ":"))
            gz.write(line.encode("utf-8") + b"\n")
    data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(data)
    print(f"{hashlib.sha256(data).hexdigest()}  {os.path.relpath(path, ROOT)}  ({len(data)} bytes)")


def main():
    rng, paras = random.Random(SEED), paragraphs()
    os.makedirs(OUT, exist_ok=True)

    # Train: 50 long, 40 medium, 60 short documents, in shuffled order.
    ranges = [(1500, 6000)] * 50 + [(600, 1500)] * 40 + [(100, 600)] * 60
    rng.shuffle(ranges)
    train = []
    for n, (lo, hi) in enumerate(ranges):
        text, ascii_only = document(rng, paras, lo, hi), False
        if n % 17 == 5:  # 9 documents carry special characters
            special = SPECIALS[(n // 17) % len(SPECIALS)]
            at = text.find(" ", len(text) // 2)
            text = text[:at] + " " + special + "\n" + text[at + 1:] if at > 0 else text + " " + special
            ascii_only = (n // 17) % 2 == 0
        train.append((record(rng, n, text, "train"), ascii_only))
    write(os.path.join(OUT, "c4-train.00000-of-01024.json.gz"), train)

    # Validation: 1,200 short documents (the reference joins only the first 1,100).
    val = [(record(rng, n, document(rng, paras, 60, 300), "validation"), False) for n in range(1200)]
    write(os.path.join(OUT, "c4-validation.00000-of-00008.json.gz"), val)


if __name__ == "__main__":
    main()
