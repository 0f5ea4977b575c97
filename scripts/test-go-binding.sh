#!/usr/bin/env bash
# Vets and tests the Go binding (bindings/go) offline against the in-tree
# build: `go vet` and `go test -race` on the host backend, built with the
# vpmm_intree tag (headers and library from the checkout instead of
# pkg-config), CGO_CFLAGS/CGO_LDFLAGS naming BUILD_DIR first.
# Usage: scripts/test-go-binding.sh BUILD_DIR
# Exit 77 (meson's SKIP) only when go is not installed (.ci/run installs
# Debian's golang-go).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
command -v go >/dev/null 2>&1 || { echo "SKIP: go is not installed (apt-get install golang-go)"; exit 77; }
export CGO_ENABLED=1 GO111MODULE=on GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local
export CGO_CFLAGS="-I$build/include -I$root/include" CGO_LDFLAGS="-L$build"
export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Without a HOME (some CI shells) go has no default cache directory.
[ -n "${HOME:-}" ] || export GOCACHE="$build/bindings/go-cache"
unset VPMM_BACKEND VPMM_PAGE_SIZE VPMM_MEMORY_LIMIT
cd "$root/bindings/go"
echo "== $(go version)"
go vet -tags vpmm_intree ./...
echo "ok: go vet"
go test -race -count=1 -v -tags vpmm_intree ./...
echo "ok: Go binding"
