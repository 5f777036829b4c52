#!/usr/bin/env python3
"""Writes small synthetic zero-shot task data in the real Hugging Face Hub schemas.

For each of the seven lm-evaluation-harness zero-shot tasks used to score pruned models,
this writes one split file laid out like the Hub repository, so that both lm-eval (through
`scripts/zeroshot-reference.py`) and wanda's native scorer can read it without a network:

    OUT/aps/super_glue/boolq/validation-00000-of-00001.parquet        boolq
    OUT/nyu-mll/glue/rte/validation-00000-of-00001.parquet            rte
    OUT/Rowan/hellaswag/default/validation-00000-of-00001.parquet     hellaswag
    OUT/allenai/winogrande/winogrande_xl/validation-00000-of-00001.parquet
    OUT/allenai/ai2_arc/ARC-Easy/test-00000-of-00001.parquet          arc_easy
    OUT/allenai/ai2_arc/ARC-Challenge/test-00000-of-00001.parquet     arc_challenge
    OUT/allenai/openbookqa/main/test-00000-of-00001.parquet           openbookqa

Columns, their order and Arrow types follow the real data sets (boolq/rte `label` and `idx`
are integers with a ClassLabel in the `huggingface` schema metadata, as the Hub's own parquet
files carry; hellaswag `label` is a string and `endings` a list of strings; winogrande
`answer` is "1"/"2"; arc/openbookqa `choices` is struct<text: list<string>, label:
list<string>> and `answerKey` a string). With --jsonl the same rows go to
`<split>-00000-of-00001.jsonl` files instead (one JSON object a line, no schema metadata).

The text is drawn from WikiText-2 (lightly detokenised) so a real tokenizer sees real English.
The documents exercise the parts of lm-eval's prompt building that a re-implementation can
get wrong:
  * hellaswag: ` [title]` (becomes ". "), bracketed tags (`[header]`, `[step]`, `[substeps]`)
    that are deleted, the double spaces this leaves, a ctx_b in lower case (capitalised; note
    str.capitalize() also lower-cases the rest, so ctx_b carries capitals too), an empty ctx_b,
    a ctx ending in a tag (the query then ends in a space) and both ActivityNet and WikiHow
    style activity labels;
  * winogrande: `_` near the start, in the middle and near the end (sometimes right before the
    final "."), options of very different lengths;
  * arc: 3, 4 and 5 choices, labels "A".."E" and "1".."4";
  * openbookqa: answerKey sometimes with a leading space, stems with and without "?", some
    ending in a space;
  * boolq: lower-case questions without "?" (a few with one, giving "??"), passages that end
    in a space or newline; rte: multi-sentence premises.

Deterministic for a given --seed and --text. Needs only pyarrow (and the standard library).

    python3 scripts/make-zeroshot-data.py --out /tmp/zs/data --docs 40 --seed 0 \
        --text demo/wikitext2-raw-test.txt
    python3 scripts/make-zeroshot-data.py --out /tmp/zs/data-jsonl --jsonl
"""
import argparse
import json
import os
import random
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (task, repo id, config, split) -- the split is the one lm-eval 0.4.13 evaluates on.
TASKS = [
    ("boolq", "aps/super_glue", "boolq", "validation"),
    ("rte", "nyu-mll/glue", "rte", "validation"),
    ("hellaswag", "Rowan/hellaswag", "default", "validation"),
    ("winogrande", "allenai/winogrande", "winogrande_xl", "validation"),
    ("arc_easy", "allenai/ai2_arc", "ARC-Easy", "test"),
    ("arc_challenge", "allenai/ai2_arc", "ARC-Challenge", "test"),
    ("openbookqa", "allenai/openbookqa", "main", "test"),
]


# ---------------------------------------------------------------- text source


def detok(s):
    """Undoes the most visible WikiText tokenisation ("a @-@ b", " , ", "( x )")."""
    s = s.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    s = s.replace("<unk>", "thing")
    s = re.sub(r" ([,.;:!?)\]'])", r"\1", s)
    s = re.sub(r"([(\[]) ", r"\1", s)
    s = s.replace(" n't", "n't").replace(' " ', ' "')
    return re.sub(r"\s+", " ", s).strip()


class Text:
    """Sentences and words of a WikiText file, for drawing realistic strings."""

    def __init__(self, path):
        sentences = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("="):
                    continue
                for s in re.split(r"(?<=[.!?]) (?=[A-Z])", detok(line)):
                    n = len(s.split())
                    if 6 <= n <= 30 and s[-1] in ".!?" and '"' not in s:
                        sentences.append(s)
        if len(sentences) < 100:
            raise SystemExit(f"{path}: too few usable sentences ({len(sentences)})")
        self.sentences = sentences
        words = sorted({w.strip(",.;:()").lower() for s in sentences for w in s.split()})
        self.words = [w for w in words if w.isalpha() and len(w) > 2]
        self.capitalised = sorted(
            {w.strip(",.;:()") for s in sentences for w in s.split()[1:]
             if w[:1].isupper() and w.strip(",.;:()").isalpha()})

    def sentence(self, rng):
        return rng.choice(self.sentences)

    def sentences_(self, rng, n):
        return " ".join(self.sentence(rng) for _ in range(n))

    def phrase(self, rng, lo, hi):
        """lo..hi consecutive words of a sentence, without its final punctuation."""
        words = self.sentence(rng).rstrip(".!?").split()
        n = min(len(words), rng.randint(lo, hi))
        start = rng.randint(0, len(words) - n)
        return " ".join(words[start:start + n])

    def word(self, rng):
        return rng.choice(self.words)

    def name(self, rng):
        return rng.choice(self.capitalised)


# ---------------------------------------------------------------- tasks
# Each builder returns (rows, columns) where columns is [(name, arrow type spec, hf feature)].

STR = ("string", {"dtype": "string", "_type": "Value"})
I32 = ("int32", {"dtype": "int32", "_type": "Value"})


def class_label(names):
    return ("int64", {"names": names, "_type": "ClassLabel"})


CHOICES = ("choices", {"feature": {"text": STR[1], "label": STR[1]}, "_type": "Sequence"})
LIST_STR = ("list_string", {"feature": STR[1], "_type": "Sequence"})


def boolq(rng, text, n):
    aux = ["is", "does", "can", "was", "are", "did", "has", "is there a", "do", "will"]
    rows = []
    for i in range(n):
        passage = text.sentences_(rng, rng.randint(2, 6))
        if i % 7 == 3:
            passage += " "  # trailing space: "... \nQuestion:"
        elif i % 7 == 5:
            passage += "\n"  # trailing newline: "...\n\nQuestion:"
        question = f"{rng.choice(aux)} {text.phrase(rng, 3, 9).lower()}"
        question = re.sub(r"[,;:]", "", question)
        if i % 9 == 4:
            question += "?"  # lm-eval's template adds another: "...??"
        rows.append({"question": question, "passage": passage, "idx": i,
                     "label": rng.randint(0, 1)})
    cols = [("question", *STR), ("passage", *STR), ("idx", *I32),
            ("label", *class_label(["False", "True"]))]
    return rows, cols


def rte(rng, text, n):
    rows = []
    for i in range(n):
        premise = text.sentences_(rng, rng.randint(1, 3))
        if rng.random() < 0.5:
            hypothesis = rng.choice(re.split(r"(?<=[.!?]) ", premise))
        else:
            hypothesis = text.phrase(rng, 5, 12) + "."
            hypothesis = hypothesis[0].upper() + hypothesis[1:]
        rows.append({"sentence1": premise, "sentence2": hypothesis,
                     "label": rng.randint(0, 1), "idx": i})
    cols = [("sentence1", *STR), ("sentence2", *STR),
            ("label", *class_label(["entailment", "not_entailment"])), ("idx", *I32)]
    return rows, cols


ACTIVITYNET_LABELS = ["Removing ice from car", "Playing guitarra", "Cleaning windows",
                      "Doing karate", "Mowing the lawn", "Ironing clothes", "Shaving legs",
                      "Using the balance beam", "Preparing pasta", "Playing polo"]
WIKIHOW_LABELS = ["Home and Garden", "Personal Care and Style", "Food and Entertaining",
                  "Health", "Finance and Business", "Computers and Electronics",
                  "Pets and Animals", "Education and Communications", "Sports and Fitness"]


def hellaswag(rng, text, n):
    rows = []
    for i in range(n):
        wikihow = i % 2 == 1
        if wikihow:
            label = rng.choice(WIKIHOW_LABELS)
            how = text.phrase(rng, 2, 5).lower()
            ctx_a = f"[header] How to {how} [title] {text.sentence(rng)}"
            if i % 6 == 1:
                ctx_a += f" [step] {text.sentence(rng)}"
            if i % 6 == 3:
                ctx_a += "  " + text.sentence(rng)  # a double space survives into the query
            # WikiHow ctx_b: often empty, or a lower-case clause (capitalised by lm-eval).
            clause = text.phrase(rng, 3, 8)
            ctx_b = "" if i % 4 == 1 else clause[0].lower() + clause[1:]
            if i % 10 == 7:
                ctx_b = "[substeps]"  # query ends "... [substeps]" -> trailing space
            source_id = f"wikihow~{rng.randint(1000, 120000)}"
            split_type = "zeroshot" if i % 3 == 0 else "indomain"
        else:
            label = rng.choice(ACTIVITYNET_LABELS)
            ctx_a = text.sentence(rng)
            # ActivityNet ctx_b: lower-case start, with a capitalised name later on
            # (str.capitalize() lower-cases it: "Then John" -> "Then john").
            ctx_b = f"{rng.choice(['then', 'the man', 'a woman', 'we see', 'she'])} {text.name(rng)} {text.phrase(rng, 2, 6)}"
            source_id = f"activitynet~v_{''.join(rng.choice('abcdefghijkmnopqrstuvwxyzABCDEFGH0123456789_-') for _ in range(11))}"
            split_type = "indomain" if i % 3 else "zeroshot"
        endings = []
        for k in range(4):
            e = text.phrase(rng, 4, 16) + rng.choice([".", ".", "!", ""])
            if wikihow and k % 2 == 0:
                e += f" [substeps] {text.sentence(rng)}"
            if wikihow and (i + k) % 5 == 0:
                e = f"[title] {e[0].upper()}{e[1:]} [step] {text.sentence(rng)}"
            if (i + k) % 7 == 2:
                e = e.replace(" ", "  ", 1)  # double space, collapsed by preprocess
            if (i + k) % 11 == 4:
                e += " "  # trailing space, stripped by preprocess
            endings.append(e)
        ctx = ctx_a + " " + ctx_b if ctx_b else ctx_a
        rows.append({"ind": 4 * i + 24, "activity_label": label, "ctx_a": ctx_a, "ctx_b": ctx_b,
                     "ctx": ctx, "endings": endings, "source_id": source_id, "split": "val",
                     "split_type": split_type, "label": str(rng.randint(0, 3))})
    cols = [("ind", *I32), ("activity_label", *STR), ("ctx_a", *STR), ("ctx_b", *STR),
            ("ctx", *STR), ("endings", *LIST_STR), ("source_id", *STR), ("split", *STR),
            ("split_type", *STR), ("label", *STR)]
    return rows, cols


def winogrande(rng, text, n):
    rows = []
    for i in range(n):
        words = text.sentence(rng).split()
        where = i % 4  # 0: near the start, 1: middle, 2: near the end, 3: right before "."
        if where == 0:
            pos = rng.randint(0, min(2, len(words) - 2))
        elif where == 1:
            pos = len(words) // 2
        elif where == 2:
            pos = len(words) - 3
        else:
            pos = len(words) - 1
        tail = ""
        if where == 3:
            tail = words[pos][-1] if words[pos][-1] in ".!?" else "."
        trailing = words[pos][-1] if where != 3 and words[pos][-1] in ",;:" else ""
        words[pos] = "_" + tail + trailing
        sentence = " ".join(words)
        short = text.name(rng)
        long = "the " + text.phrase(rng, 2, 5).lower()
        options = [short, long] if i % 2 else [long, short]
        if i % 5 == 0:
            options = [text.name(rng), text.name(rng)]
        rows.append({"sentence": sentence, "option1": options[0], "option2": options[1],
                     "answer": rng.choice(["1", "2"])})
    cols = [("sentence", *STR), ("option1", *STR), ("option2", *STR), ("answer", *STR)]
    return rows, cols


def arc(rng, text, n, challenge):
    rows = []
    prefixes = ["Mercury_", "MCAS_2000_4_", "NYSEDREGENTS_2015_4_", "Mercury_SC_", "ACTAAP_2009_5_",
                "MDSA_2008_8_", "VASoL_2009_3_"]
    for i in range(n):
        k = [3, 4, 4, 4, 5][i % 5]
        numeric = i % 6 == 2 and k <= 4
        labels = [str(j + 1) for j in range(k)] if numeric else list("ABCDE"[:k])
        q = text.sentence(rng)
        if i % 3 == 0:
            q = f"{q} Which of the following best describes {text.phrase(rng, 2, 5).lower()}?"
        else:
            q = f"{rng.choice(['What', 'Which', 'Why', 'How'])} {text.phrase(rng, 4, 10).lower()}?"
        choices = [text.phrase(rng, 1, 7 if challenge else 4) for _ in range(k)]
        rows.append({"id": f"{rng.choice(prefixes)}{rng.randint(1, 7300000)}", "question": q,
                     "choices": {"text": choices, "label": labels},
                     "answerKey": rng.choice(labels)})
    cols = [("id", *STR), ("question", *STR), ("choices", *CHOICES), ("answerKey", *STR)]
    return rows, cols


def openbookqa(rng, text, n):
    rows = []
    for i in range(n):
        if i % 3 == 0:
            stem = f"{rng.choice(['Which', 'What', 'How'])} {text.phrase(rng, 4, 10).lower()}?"
        else:
            stem = text.phrase(rng, 4, 12)
            stem = stem[0].upper() + stem[1:]
        if i % 8 == 5:
            stem += " "  # context ending in a space: lm-eval moves it into the continuation
        labels = list("ABCD")
        key = rng.choice(labels)
        if i % 4 == 1:
            key = " " + key  # lm-eval's target template lstrips it
        rows.append({"id": f"{rng.randint(7, 9)}-{rng.randint(1, 999)}", "question_stem": stem,
                     "choices": {"text": [text.phrase(rng, 1, 5).lower() for _ in labels],
                                 "label": labels},
                     "answerKey": key})
    cols = [("id", *STR), ("question_stem", *STR), ("choices", *CHOICES), ("answerKey", *STR)]
    return rows, cols


BUILDERS = {
    "boolq": boolq,
    "rte": rte,
    "hellaswag": hellaswag,
    "winogrande": winogrande,
    "arc_easy": lambda rng, text, n: arc(rng, text, n, challenge=False),
    "arc_challenge": lambda rng, text, n: arc(rng, text, n, challenge=True),
    "openbookqa": openbookqa,
}


# ---------------------------------------------------------------- writers


def write_parquet(path, rows, cols):
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {
        "string": pa.string(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "list_string": pa.list_(pa.string()),
        "choices": pa.struct([("text", pa.list_(pa.string())), ("label", pa.list_(pa.string()))]),
    }
    features = {name: feature for name, _, feature in cols}
    schema = pa.schema([(name, types[t]) for name, t, _ in cols],
                       metadata={"huggingface": json.dumps({"info": {"features": features}})})
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path)


def write_jsonl(path, rows, cols):
    names = [name for name, _, _ in cols]
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({k: row[k] for k in names}, ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (Hub-like layout under it)")
    ap.add_argument("--docs", type=int, default=40, help="documents per task (default 40)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--text", default=os.path.join(ROOT, "demo", "wikitext2-raw-test.txt"),
                    help="WikiText-2 raw text to draw sentences and words from")
    ap.add_argument("--jsonl", action="store_true", help="write .jsonl instead of .parquet")
    ap.add_argument("--tasks", default=",".join(t for t, *_ in TASKS),
                    help="comma-separated subset of the seven tasks")
    args = ap.parse_args()

    text = Text(args.text)
    wanted = args.tasks.split(",")
    unknown = set(wanted) - set(BUILDERS)
    if unknown:
        ap.error(f"unknown task(s): {sorted(unknown)}")
    for task, repo, config, split in TASKS:
        if task not in wanted:
            continue
        # One generator per task, so each task's data does not depend on the others.
        rng = random.Random(f"{args.seed}:{task}")
        rows, cols = BUILDERS[task](rng, text, args.docs)
        ext = "jsonl" if args.jsonl else "parquet"
        d = os.path.join(args.out, repo, config)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{split}-00000-of-00001.{ext}")
        (write_jsonl if args.jsonl else write_parquet)(path, rows, cols)
        print(f"{task:14s} {len(rows):5d} docs -> {path}")


if __name__ == "__main__":
    main()
