#!/usr/bin/env bash
# Installs the Debian packages the build needs, only those missing.
# Always: the compilers and build tools (meson, ninja-build, g++,
# pkg-config), zlib1g-dev (`vpmm replay` reads gzip snapshots), and what
# `pip install .` needs offline from any Python (python3-mesonpy: this
# tree's build backend finds Debian's meson-python for a pyenv or venv
# Python too; python3-venv: Debian's own python3 installs only into a venv),
# which scripts/demo.sh's last line suggests. Callers add what else they use
# (scripts/test.sh: the bindings' toolchains, NumPy, ...).
# Usage: scripts/deps.sh [extra-package ...]
set -euo pipefail
need=()
for pkg in meson ninja-build g++ pkg-config python3 python3-mesonpy python3-venv zlib1g-dev "$@"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  # apt's own count: the packages asked for and their dependencies.
  total=$(apt-get -s install "${need[@]}" 2>/dev/null | grep -c '^Inst ' || true)
  echo "installing: ${need[*]} ($total packages with their dependencies)"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
