#!/usr/bin/env python3
"""Reference zero-shot scores from lm-evaluation-harness on local task data, document by document.

Runs lm-eval (written against 0.4.13) with its stock task definitions -- the installed task
YAMLs and their utils (doc_to_text / doc_to_choice / process_docs / target delimiter) apply
unchanged -- but reads each task's documents from a local file instead of the Hugging Face
Hub, so a native scorer can be compared with it request by request. For each task this writes
a small YAML into a temporary directory:

    include: <site-packages>/lm_eval/tasks/<task yaml>   # absolute path
    task: wanda_zs_<task>
    dataset_path: parquet            # or json for .jsonl data
    dataset_name: null
    dataset_kwargs: {data_files: {<split>: <DATA>/<repo>/<config>/<split>-00000-of-00001.parquet}}
    training_split: null             # only the evaluated split exists locally

and evaluates it with lm_eval.simple_evaluate(model="hf", ..., num_fewshot=0, log_samples=True,
device="cpu") through a TaskManager(include_path=<temp dir>). Tasks run one at a time with the
model loaded once, so each task's wall time is its own. The data layout is the one
`scripts/make-zeroshot-data.py` writes (or a real Hub snapshot of the same files).

Output (one JSON file; task keys are the real lm-eval task names, not the local wanda_zs_*):

    {"lm_eval_version": "0.4.13", "model": ..., "model_load_seconds": ..., "torch_threads": 2,
     "tasks": {"boolq": {"acc", "acc_stderr", "acc_norm", "acc_norm_stderr" (null where the task
               has no such metric), "n", "seconds", "docs_per_second", "data_file",
               "docs": [{"doc_id", "lls": [loglik per choice], "gold", "requests":
                         [[context, continuation], ...], "greedy": [...], "acc", "acc_norm"}]}}}

    ~/.cache/wanda-ab-venv/bin/python scripts/zeroshot-reference.py --data /tmp/zs/data \
        --model /tmp/zs/smollm2-dense --tasks boolq,rte,hellaswag,winogrande,arc_easy,arc_challenge,openbookqa \
        --out /tmp/zs/ref.json [--limit N] [--batch-size 1] [--format auto|parquet|jsonl]

With `--base-url http://127.0.0.1:PORT` lm-eval's `local-completions` model scores through an
OpenAI-compatible server instead (`wanda serve --model M --port PORT`): token-id prompts, the
server's own tokenizer through its /tokenize endpoints (`tokenizer_backend=remote`), one request
at a time; `--model` is then only recorded.

Everything is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE are set before importing anything).
"""
import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# task -> (installed YAML relative to lm_eval/tasks, repo id, config, evaluated split)
TASKS = {
    "boolq": ("super_glue/boolq/default.yaml", "aps/super_glue", "boolq", "validation"),
    "rte": ("glue/rte/default.yaml", "nyu-mll/glue", "rte", "validation"),
    "hellaswag": ("hellaswag/hellaswag.yaml", "Rowan/hellaswag", "default", "validation"),
    "winogrande": ("winogrande/default.yaml", "allenai/winogrande", "winogrande_xl", "validation"),
    "arc_easy": ("arc/arc_easy.yaml", "allenai/ai2_arc", "ARC-Easy", "test"),
    "arc_challenge": ("arc/arc_challenge.yaml", "allenai/ai2_arc", "ARC-Challenge", "test"),
    "openbookqa": ("openbookqa/openbookqa.yaml", "allenai/openbookqa", "main", "test"),
}
LOCAL_PREFIX = "wanda_zs_"
SPLITS = ("training_split", "validation_split", "test_split")


def find_data(data_dir, repo, config, split, fmt):
    """The local file for one task, and the datasets builder that reads it."""
    stem = os.path.join(data_dir, repo, config, f"{split}-00000-of-00001")
    candidates = {"parquet": [("parquet", ".parquet")], "jsonl": [("json", ".jsonl")],
                  "auto": [("parquet", ".parquet"), ("json", ".jsonl")]}[fmt]
    for builder, ext in candidates:
        if os.path.isfile(stem + ext):
            return builder, os.path.abspath(stem + ext)
    raise SystemExit(f"no data for {repo}/{config} {split}: expected {stem}.parquet or .jsonl")


def write_task_yaml(yaml_dir, tasks_dir, task, builder, path):
    """A task config that includes the stock one and only swaps the data source."""
    import yaml

    from lm_eval.tasks._yaml_loader import load_yaml

    rel, _, _, split = TASKS[task]
    stock = os.path.join(tasks_dir, rel)
    resolved = load_yaml(stock, resolve_func=False)  # to see which splits the task names
    eval_key = "test_split" if resolved.get("test_split") else "validation_split"
    if resolved.get(eval_key) != split:
        raise SystemExit(f"{task}: installed lm-eval evaluates {resolved.get(eval_key)!r}, "
                         f"this script expects {split!r}")
    cfg = {
        "include": stock,
        "task": LOCAL_PREFIX + task,
        "tag": "wanda_zs_local",  # replaces the stock tag (e.g. ai2_arc) so nothing else matches
        "dataset_path": builder,
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {split: path}},
    }
    # Only the evaluated split exists locally; lm-eval would otherwise load the training split
    # for its (unused at 0-shot) few-shot sampler and fail.
    for key in SPLITS:
        if key != eval_key and resolved.get(key) is not None:
            cfg[key] = None
    with open(os.path.join(yaml_dir, f"{LOCAL_PREFIX}{task}.yaml"), "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)


def gold_of(task, sample):
    """The gold choice index, the way lm-eval's process_results derives it."""
    target = sample["target"]
    if task == "winogrande":
        # Multiple-input task: doc_to_text gives the gold index, doc_to_target the shared
        # continuation.
        from lm_eval.tasks.winogrande.preprocess_winogrande import doc_to_text
        return doc_to_text(sample["doc"])
    if isinstance(target, int):
        return target
    raise ValueError(f"{task}: unexpected target {target!r}")


def summarise(task, local, results):
    import numpy as np

    metrics = results["results"][local]

    def metric(name):
        v = metrics.get(f"{name},none")
        return None if v in (None, "N/A") else float(v)

    docs = []
    for s in sorted(results["samples"][local], key=lambda s: s["doc_id"]):
        lls = [float(r[0][0]) for r in s["resps"]]
        greedy = [bool(r[0][1]) for r in s["resps"]]
        doc = {"doc_id": s["doc_id"], "lls": lls, "gold": gold_of(task, s),
               "requests": [list(a) for a in s["arguments"]], "greedy": greedy,
               "acc": s.get("acc"), "acc_norm": s.get("acc_norm")}
        # Self-check: the per-document metrics follow from lls and gold as described.
        assert doc["acc"] == float(int(np.argmax(lls)) == doc["gold"]), (task, doc)
        if doc["acc_norm"] is not None:
            # acc_norm divides by the choice's length in characters (target delimiter excluded).
            lens = [len(cont) - 1 for _, cont in doc["requests"]]
            assert doc["acc_norm"] == float(int(np.argmax(np.array(lls) / lens)) == doc["gold"])
        docs.append(doc)
    return {
        "acc": metric("acc"),
        "acc_stderr": metric("acc_stderr"),
        "acc_norm": metric("acc_norm"),
        "acc_norm_stderr": metric("acc_norm_stderr"),
        "n": len(docs),
        "docs": docs,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="directory laid out as <repo>/<config>/<split>-...")
    ap.add_argument("--model", required=True, help="Hugging Face model folder")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--limit", type=int, default=None, help="first N documents of each task")
    ap.add_argument("--out", required=True, help="output JSON file")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--format", choices=["auto", "parquet", "jsonl"], default="auto",
                    help="which local files to read (auto: parquet if present, else jsonl)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--base-url", help="score through this OpenAI-compatible server "
                    "(lm-eval's local-completions) instead of loading --model with `hf`")
    args = ap.parse_args()

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        ap.error(f"unknown task(s) {unknown}; known: {', '.join(TASKS)}")

    import torch

    torch.set_num_threads(args.threads)
    import lm_eval
    import lm_eval.tasks
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager

    version = getattr(lm_eval, "__version__", "unknown")
    if version != "0.4.13":
        print(f"warning: written against lm-eval 0.4.13, found {version}", file=sys.stderr)
    tasks_dir = os.path.dirname(os.path.abspath(lm_eval.tasks.__file__))

    out = {"lm_eval_version": version, "model": os.path.abspath(args.model),
           "data": os.path.abspath(args.data), "batch_size": args.batch_size,
           "limit": args.limit, "torch_threads": torch.get_num_threads(), "tasks": {}}
    model_args = f"pretrained={os.path.abspath(args.model)},dtype=float32"

    with tempfile.TemporaryDirectory(prefix="wanda-zs-tasks-") as yaml_dir:
        files = {}
        for task in tasks:
            _, repo, config, split = TASKS[task]
            builder, path = find_data(args.data, repo, config, split, args.format)
            files[task] = path
            write_task_yaml(yaml_dir, tasks_dir, task, builder, path)
        # include_defaults=False: index only our YAMLs (the includes still resolve by path).
        tm = TaskManager(include_path=yaml_dir, include_defaults=False)
        missing = [t for t in tasks if LOCAL_PREFIX + t not in tm.all_subtasks]
        if missing:  # lm-eval skips YAMLs it cannot parse without saying so
            raise SystemExit(f"lm-eval did not index the local task(s) {missing}")

        # The same construction simple_evaluate does for model="hf", once, so that model
        # loading is not charged to the first task.
        t0 = time.perf_counter()
        if args.base_url:
            import urllib.request
            url = args.base_url.rstrip("/")
            name = json.load(urllib.request.urlopen(f"{url}/v1/models"))["data"][0]["id"]
            model_args = (f"model={name},base_url={url}/v1/completions,tokenizer_backend=remote,"
                          "tokenized_requests=True,max_length=8192,num_concurrent=1")
            lm = get_model("local-completions").create_from_arg_string(
                model_args, {"batch_size": args.batch_size})
        else:
            lm = get_model("hf").create_from_arg_string(
                model_args, {"batch_size": args.batch_size, "max_batch_size": None,
                             "device": "cpu"})
        out["model_load_seconds"] = round(time.perf_counter() - t0, 3)
        out["model_args"] = model_args

        for task in tasks:
            local = LOCAL_PREFIX + task
            t0 = time.perf_counter()
            results = lm_eval.simple_evaluate(
                model=lm, tasks=[local], num_fewshot=0, batch_size=args.batch_size,
                device="cpu", limit=args.limit, log_samples=True, task_manager=tm)
            seconds = time.perf_counter() - t0
            entry = summarise(task, local, results)
            entry["seconds"] = round(seconds, 3)
            entry["docs_per_second"] = round(entry["n"] / seconds, 3) if seconds > 0 else None
            entry["data_file"] = files[task]
            # Keep the key order of the brief: metrics, n, seconds, ..., docs last.
            docs = entry.pop("docs")
            entry["docs"] = docs
            out["tasks"][task] = entry
            print(f"{task:14s} n={entry['n']:4d} acc={entry['acc']} acc_norm={entry['acc_norm']} "
                  f"{seconds:.1f}s ({entry['docs_per_second']} docs/s)", file=sys.stderr)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
