#!/usr/bin/env bash
# Decode and prefill tokens/s of llama.cpp's llama-bench beside wanda's B12 (`wanda bench
# decode`) on the same CPU with the same threads, interleaved round by round (issue 76).
#
#   scripts/llama-cpp-decode.sh GGUF [ROUNDS] [PROMPT] [TOKENS]
#
# GGUF is requantised by llama-quantize to F32 and BF16 for llama.cpp; wanda reads GGUF as is
# (dequantised to f32), or WANDA_MODEL instead (e.g. a pruned Hugging Face folder of the same
# model, decoded with its linears compressed). WANDA_BIN picks the binary (default: the release
# build), THREADS the threads of both (default: the CPUs). llama.cpp is built once from the
# llama-cpp-python sdist on PyPI (its vendor/llama.cpp) into LLAMA_CPP_DIR (default
# ~/.cache/wanda-llama-cpp) with cmake and ninja from a venv there: ~6 minutes on 2 cores, so
# not in CI.
set -euo pipefail

gguf=${1:?usage: scripts/llama-cpp-decode.sh GGUF [ROUNDS] [PROMPT] [TOKENS]}
rounds=${2:-3}
prompt=${3:-128}
tokens=${4:-64}
dir=${LLAMA_CPP_DIR:-$HOME/.cache/wanda-llama-cpp}
wanda=${WANDA_BIN:-$(dirname "$0")/../target/release/wanda}
model=${WANDA_MODEL:-$gguf}
threads=${THREADS:-$(nproc)}

[ -f "$gguf" ] || { echo "no GGUF file at $gguf" >&2; exit 2; }
[ -x "$wanda" ] || { echo "no wanda binary at $wanda: run cargo build --release" >&2; exit 2; }

bench="$dir/build/bin/llama-bench"
quantize="$dir/build/bin/llama-quantize"
if [ ! -x "$bench" ] || [ ! -x "$quantize" ]; then
    mkdir -p "$dir"
    [ -x "$dir/venv/bin/cmake" ] || {
        python3 -m venv "$dir/venv"
        "$dir/venv/bin/pip" install -q scikit-build-core cmake ninja pathspec
    }
    sdist=$(ls "$dir"/llama_cpp_python-*.tar.gz 2>/dev/null | head -1 || true)
    if [ -z "$sdist" ]; then
        "$dir/venv/bin/pip" download -q --no-deps --no-binary=:all: --no-build-isolation \
            llama-cpp-python -d "$dir"
        sdist=$(ls "$dir"/llama_cpp_python-*.tar.gz | head -1)
    fi
    rm -rf "$dir/src" && mkdir -p "$dir/src"
    tar xzf "$sdist" -C "$dir/src" --strip-components=1
    PATH="$dir/venv/bin:$PATH" cmake -S "$dir/src/vendor/llama.cpp" -B "$dir/build" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=OFF
    PATH="$dir/venv/bin:$PATH" cmake --build "$dir/build" --target llama-bench llama-quantize
fi

stem=$(basename "$gguf" .gguf)
for type in F32 BF16; do
    out="$dir/$stem.$type.gguf"
    [ -f "$out" ] || "$quantize" --allow-requantize "$gguf" "$out" "$type" > /dev/null 2>&1
done

# One llama-bench run: "prefill decode" tokens/s (its averages of 3 repetitions).
llama_rates() {
    "$bench" -m "$1" -t "$threads" -p "$prompt" -n "$tokens" -r 3 -o json 2> /dev/null |
        python3 -c 'import json, sys
runs = json.load(sys.stdin)
pp = next(r["avg_ts"] for r in runs if r["n_prompt"] > 0 and r["n_gen"] == 0)
tg = next(r["avg_ts"] for r in runs if r["n_gen"] > 0 and r["n_prompt"] == 0)
print(pp, tg)'
}

# One wanda B12 run: "prefill decode" tokens/s (the median of 3 rounds), from the figure.
wanda_rates() {
    RAYON_NUM_THREADS=$threads "$wanda" bench decode --model "$model" --device cpu --json \
        --repeats 3 --prompt "$prompt" --tokens "$tokens" 2> /dev/null |
        python3 -c 'import json, re, sys
f = json.load(sys.stdin)
print(re.search(r"prompt at ([0-9.]+) tokens/s", f["name"]).group(1), f["median"])'
}

results=$(mktemp)
for round in $(seq "$rounds"); do
    echo "round $round of $rounds" >&2
    echo "llama.cpp-F32 $(llama_rates "$dir/$stem.F32.gguf")" >> "$results"
    echo "llama.cpp-BF16 $(llama_rates "$dir/$stem.BF16.gguf")" >> "$results"
    echo "wanda $(wanda_rates)" >> "$results"
done

echo "$(lscpu | sed -n 's/^Model name: *//p'), $threads threads; prompt $prompt, $tokens decode steps;"
echo "wanda decodes $model"
python3 - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, pp, tg = line.split()
    rows.setdefault(name, []).append((float(pp), float(tg)))
wanda = statistics.median(tg for _, tg in rows["wanda"])
print(f"| who | prefill tokens/s | decode tokens/s (rounds) | wanda decode / this |")
print(f"|---|---:|---:|---:|")
for name, runs in rows.items():
    pp = statistics.median(p for p, _ in runs)
    tg = statistics.median(t for _, t in runs)
    each = " · ".join(f"{t:.1f}" for _, t in runs)
    print(f"| {name} | {pp:.1f} | {tg:.1f} ({each}) | {wanda / tg:.2f}× |")
PY
rm -f "$results"
