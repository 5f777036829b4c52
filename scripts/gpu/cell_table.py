# The speed section's cells (run.sh section 3) as one Markdown table per results file: for each
# shape and type, PyTorch (torch_cell.py) and every wanda run of it, in seconds. wanda's
# "calibrate + prune" adds its calibrate stage (tokenising the calibration text) to its prune
# stage, as PyTorch's prune time includes its tokenisation; "process" is the command's whole wall
# time (start-up, CUDA set-up and the load included) as run.sh timed it. Ratios are against
# PyTorch; "bits" says whether a run's perplexity equals the `base` run's to the bit.
#   python3 cell_table.py results.jsonl [more.jsonl ...]
import json
import sys


def cells(path):
    """{(shape, type): {run: (result, wall_s)}} of the speed section's records in `path`."""
    found = {}
    for line in open(path):
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        tag, r = d.get("tag", ""), d.get("result")
        if "-cell-" not in tag or not isinstance(r, dict):
            continue
        run, rest = tag.split("-cell-", 1)
        shape, kind = rest.split("-", 1)
        kind = {"float32": "f32", "cuda": "f32", "float16": "fp16", "cuda-f16": "fp16"}.get(kind, kind)
        found.setdefault((shape, kind), {})[run] = (r, d.get("wall_s"))
    return found


def seconds(run, r):
    """(load, calibrate + prune, eval, perplexity) of one record."""
    if run == "torch":
        return r["load_s"], r["prune_s"], r["eval_s"], r["perplexity"]
    ppl = (r.get("perplexity") or {}).get("perplexity")
    work = r["prune_seconds"] + (r.get("calibrate_seconds") or 0.0)
    return r["load_seconds"], work, r.get("eval_seconds") or 0.0, ppl


def table(found):
    print("| shape, type | run | load | calibrate + prune | eval | prune + eval | ratio "
          "| process | ratio | perplexity | bits |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for (shape, kind), runs in found.items():
        torch = runs.get("torch")
        if torch is None:
            continue
        t_load, t_work, t_eval, _ = seconds("torch", torch[0])
        t_sum, t_wall = t_work + t_eval, torch[1]
        base_ppl = seconds("base", runs["base"][0])[3] if "base" in runs else None
        for run, (r, wall) in runs.items():
            load, work, ev, ppl = seconds(run, r)
            ratio = "" if run == "torch" else f"{(work + ev) / t_sum:.2f}×"
            wall_ratio = "" if run == "torch" or not wall or not t_wall else f"{wall / t_wall:.2f}×"
            bits = "" if base_ppl is None or run in ("torch", "base") else (
                "same" if ppl == base_ppl else "differ")
            print(f"| {shape} {kind} | {run} | {load:.2f} | {work:.2f} | {ev:.2f} | "
                  f"{work + ev:.2f} | {ratio} | {f'{wall:.2f}' if wall else '–'} | {wall_ratio} | {ppl} | "
                  f"{bits} |")


for path in sys.argv[1:]:
    print(f"\n{path}\n")
    table(cells(path))
