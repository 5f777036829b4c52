# What the A/B and fidelity scripts share about wanda itself (sourced, from the repository root):
# the binary — $WANDA_BIN, a binary built earlier (e.g. a copy kept while the tree changes), or
# else the tree built in release — as `$wanda`, a scratch folder `$out` removed on exit, and
# `cell_flags CELL`, which turns a cell (METHOD:SPARSITY or METHOD:N:M, with +owl and/or +dsnot, or
# a weight update +seq or +iter, e.g. wanda:0.7+owl, sparsegpt:2:4 or magnitude:0.5+iter) into `$method` and the flag arrays `ours` (wanda prune)
# and `theirs` (scripts/torch-wanda-cell.py).
if [ -n "${WANDA_BIN:-}" ]; then
  wanda="$WANDA_BIN"
else
  cargo build --release --quiet
  wanda=target/release/wanda
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cell_flags() {
  local base="${1%%+*}"
  method="${base%%:*}"
  local spec="${base#*:}"
  if [[ "$spec" == *:* ]]; then
    ours=(--pattern "$spec"); theirs=(--pattern "$spec")
  else
    ours=(--sparsity "$spec"); theirs=(--sparsity "$spec")
  fi
  [[ "$1" == *+owl* ]] && { ours+=(--profile owl); theirs+=(--owl); }
  [[ "$1" == *+dsnot* ]] && { ours+=(--dsnot); theirs+=(--dsnot); }
  [[ "$1" == *+seq* ]] && { ours+=(--weight-update sequential); theirs+=(--weight-update sequential); }
  [[ "$1" == *+iter* ]] && { ours+=(--weight-update iterative); theirs+=(--weight-update iterative); }
  return 0
}
