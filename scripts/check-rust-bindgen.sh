#!/usr/bin/env bash
# The checked-in Rust FFI (bindings/rust/vpmm-sys/src/bindings.rs) still
# matches include/vpmm.h: regenerates it with bindgen and diffs. The struct
# layouts are checked by `cargo test -p vpmm-sys` (test 'rust_binding'):
# bindgen's layout tests and tests/layout.rs against the library.
# Exit 77 (SKIP) only when bindgen is not installed (.ci/run installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
exec bindings/rust/vpmm-sys/generate.sh --check
