#!/usr/bin/env bash
# Builds and tests the Rust bindings (bindings/rust: vpmm-sys and vpmm)
# offline against the in-tree build: `cargo test --offline` (unit,
# integration and doc tests, examples built) on the host backend, and runs
# examples/memory_manager. Where Debian's toolchain (/usr/bin/cargo, rustc
# 1.63 on bookworm) is installed beside another cargo, the workspace is also
# built with it, so the oldest supported rustc is checked too.
# Usage: scripts/test-rust-bindings.sh BUILD_DIR  (where libvpmm.so was built)
# Exit 77 (meson's SKIP) only when cargo or rustc is not installed
# (.ci/run installs Debian's cargo where none is on the PATH).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
for tool in cargo rustc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is not installed (apt-get install cargo)"; exit 77; }
done
# The in-tree library, never an installed one (VPMM_NO_PKG_CONFIG), found by
# the linker through VPMM_LIB_DIR and by the loader through LD_LIBRARY_PATH.
export VPMM_NO_PKG_CONFIG=1 VPMM_LIB_DIR="$build"
export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CARGO_TARGET_DIR="$build/bindings/rust-target"
# The tests pick their own configuration; a VPMM_* variable of the caller's
# must not steer the examples.
unset VPMM_BACKEND VPMM_PAGE_SIZE VPMM_MEMORY_LIMIT
cd "$root/bindings/rust"
echo "== $(cargo --version), $(rustc --version)"
cargo test --offline --workspace
echo "== examples/memory_manager (host backend)"
VPMM_BACKEND=host cargo run --offline -q -p vpmm --example memory_manager

debian_cargo=/usr/bin/cargo
if [ -x "$debian_cargo" ] && [ -x /usr/bin/rustc ] && [ "$(command -v cargo)" != "$debian_cargo" ]; then
  echo "== oldest supported toolchain: $(/usr/bin/rustc --version)"
  RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc CARGO_TARGET_DIR="$build/bindings/rust-target-debian" \
    "$debian_cargo" test --offline --workspace --no-run
fi
echo "ok: Rust bindings"
