#!/usr/bin/env bash
# Builds the `wanda-prune` wheel into dist/: the release binary (debug info stripped, the CUDA
# backend in, which loads the driver only on a machine that has one) packed by maturin the way
# ruff and uv ship theirs. maturin comes from PyPI into a venv of its own
# ($WANDA_WHEEL_VENV, default ~/.cache/wanda-wheel-venv). Extra arguments go to `maturin build`.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${WANDA_WHEEL_VENV:-$HOME/.cache/wanda-wheel-venv}
if [[ ! -x "$venv/bin/maturin" ]]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'maturin>=1.5,<2'
fi
rm -rf dist
"$venv/bin/maturin" build --release --out dist "$@"
ls -l dist/*.whl
