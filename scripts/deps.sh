#!/usr/bin/env bash
# Installs the Debian packages the build needs, only those missing.
# Usage: scripts/deps.sh [extra-package ...]
set -euo pipefail
need=()
for pkg in meson ninja-build g++ pkg-config python3 python3-pip python3-numpy zlib1g-dev "$@"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
