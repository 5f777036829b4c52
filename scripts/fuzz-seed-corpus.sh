#!/usr/bin/env bash
# Writes the seed inputs of every fuzz target into fuzz/corpus/<target>/seed-* (generated, not
# tracked in git), the starting corpus of a `cargo +nightly fuzz run`. The same seeds are replayed
# from memory by `cargo test`, together with fuzz/regressions/ (tracked).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --test it write_seed_corpora -- --ignored
