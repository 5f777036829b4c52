#!/usr/bin/env bash
# The wheel as a Python user meets it: installs dist/*.whl (scripts/build-wheel.sh) into a
# fresh venv and runs the installed command: `wanda --version`, `python -m wanda --version`,
# `wanda validate` on every bundled pipeline and a tiny `wanda run` of the demo pipeline (its
# files from scripts/fetch-demo.sh), outside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
wheel=$(ls dist/*.whl)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet "$wheel"
export PATH="$work/venv/bin:$PATH"
cd "$work"
set -x
command -v wanda
wanda --version
python -m wanda --version
for pipeline in "$root"/pipelines/*.yaml; do
  wanda validate "$pipeline"
done
wanda run "$root/pipelines/smollm2-135m.yaml" --results "$work/results" \
  --set calibration.nsamples=2 --set evaluation.windows=2
ls "$work"/results/*/*/run.json
