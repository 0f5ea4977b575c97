#!/usr/bin/env bash
# test_ipc_faults' leak checks count libvpmm's memfds in /proc/self/fd and
# /proc/self/maps; they must count only those (issue 35 item 14: any mapping
# whose path contained "vpmm-" was counted, so the test failed whenever the
# build directory lay under e.g. libvpmm-1.0/, its own binary included).
# Runs a copy of the test binary from such a directory.
# Usage: check_ipc_faults_path.sh TEST_IPC_FAULTS_BINARY
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/libvpmm-1.0/build-vpmm-x"
cp "$1" "$work/libvpmm-1.0/build-vpmm-x/test_ipc_faults"
exec "$work/libvpmm-1.0/build-vpmm-x/test_ipc_faults"
