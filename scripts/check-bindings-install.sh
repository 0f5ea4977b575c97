#!/usr/bin/env bash
# `meson install` plus pkg-config is all both bindings need: installs the
# build into a temporary DESTDIR, points pkg-config at it
# (PKG_CONFIG_PATH + PKG_CONFIG_SYSROOT_DIR) and builds and runs, outside the
# source tree, a cgo program importing the Go package (default build: `#cgo
# pkg-config: vpmm`) and a Cargo program using vpmm-sys by its C names and
# the vpmm crate (build.rs: the pkg-config command), both linked against the
# installed libvpmm.so.1 and never the in-tree one.
# Usage: scripts/check-bindings-install.sh BUILD_DIR
# Exit 77 (SKIP) only when neither go nor cargo is installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
have_go=0; have_cargo=0
command -v go >/dev/null 2>&1 && have_go=1
command -v cargo >/dev/null 2>&1 && command -v rustc >/dev/null 2>&1 && have_cargo=1
if [ $have_go = 0 ] && [ $have_cargo = 0 ]; then
  echo "SKIP: neither go nor cargo is installed (apt-get install golang-go cargo)"
  exit 77
fi
command -v pkg-config >/dev/null 2>&1 || { echo "FAIL: pkg-config is missing"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dest="$work/root"
meson install -C "$build" --no-rebuild --destdir "$dest" --quiet >/dev/null
pc=$(find "$dest" -name vpmm.pc -path '*pkgconfig*' | head -n1)
[ -n "$pc" ] || { echo "FAIL: no vpmm.pc installed"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$dest"
libdir=$(dirname "$(find "$dest" -name libvpmm.so.1 | head -n1)")
echo "installed: $(pkg-config --modversion vpmm), $(pkg-config --cflags --libs vpmm)"
export LD_LIBRARY_PATH="$libdir"
unset VPMM_LIB_DIR VPMM_NO_PKG_CONFIG CGO_CFLAGS CGO_LDFLAGS

if [ $have_go = 1 ]; then
  mkdir "$work/gouse"
  cat > "$work/gouse/go.mod" <<GOMOD
module gouse

go 1.19

require vpmm v0.0.0
replace vpmm => $root/bindings/go
GOMOD
  cat > "$work/gouse/main.go" <<'GO'
package main

import (
	"errors"
	"fmt"

	"vpmm"
)

func main() {
	cfg := vpmm.DefaultConfig()
	cfg.Backend = vpmm.BackendHost
	p, err := vpmm.NewPool(&cfg)
	if err != nil {
		panic(err)
	}
	defer p.Close()
	ptr, err := p.MallocTagged(1<<20, vpmm.DefaultStream, "t", true)
	if err != nil {
		panic(err)
	}
	if did, err := p.Pause("t"); !did || err != nil {
		panic(fmt.Sprint("pause ", did, err))
	}
	if _, err := p.Malloc(0, vpmm.DefaultStream); !errors.Is(err, vpmm.ErrInvalidArgument) {
		panic(err)
	}
	_ = p.Free(ptr, vpmm.DefaultStream)
	fmt.Println("ok: Go program built with pkg-config against libvpmm", vpmm.Version())
}
GO
  # A cache of its own: go's build cache does not key the package on the
  # flags pkg-config gives under PKG_CONFIG_SYSROOT_DIR, and a package built
  # by an earlier run would link against that run's (deleted) DESTDIR.
  (cd "$work/gouse" && GOCACHE="$work/gocache" GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local \
    go build -o gouse . && ./gouse)
  # (ldd's output goes to a file first: grep -q closing the pipe early would
  # fail the pipeline under pipefail)
  ldd "$work/gouse/gouse" > "$work/ldd-go.txt"
  grep -q "$libdir/libvpmm.so.1" "$work/ldd-go.txt" || { echo "FAIL: Go program not linked to the installed library"; exit 1; }
fi

if [ $have_cargo = 1 ]; then
  mkdir -p "$work/rsuse/src"
  cat > "$work/rsuse/Cargo.toml" <<TOML
[package]
name = "rsuse"
version = "0.1.0"
edition = "2021"

[dependencies]
vpmm-sys = { path = "$root/bindings/rust/vpmm-sys" }
vpmm = { path = "$root/bindings/rust/vpmm" }

[workspace]
TOML
  cat > "$work/rsuse/src/main.rs" <<'RS'
use vpmm_sys::*;
fn main() {
    unsafe {
        let mut cfg: vpmm_config = std::mem::zeroed();
        vpmm_config_init_defaults(&mut cfg);
        cfg.backend = VPMM_BACKEND_HOST;
        cfg.max_handle_size = VPMM_HANDLE_SIZE_UNLIMITED;
        let mut pool: *mut vpmm_pool = std::ptr::null_mut();
        assert_eq!(vpmm_pool_create(&cfg, &mut pool), VPMM_OK);
        let status: vpmm_status = vpmm_pool_malloc(pool, 0, std::ptr::null_mut(), &mut std::ptr::null_mut());
        assert_eq!(status, VPMM_ERR_INVALID_ARGUMENT);
        assert_eq!(vpmm_pool_destroy(pool), VPMM_OK);
    }
    let pool = vpmm::Pool::new(&vpmm::Config::defaults().backend(vpmm::Backend::Host)).unwrap();
    let buf = pool.alloc(1 << 20).unwrap();
    drop(buf);
    println!("ok: Rust program built with pkg-config against libvpmm {}", vpmm::version());
}
RS
  (cd "$work/rsuse" && CARGO_TARGET_DIR="$work/rsuse/target" cargo run --offline -q)
  ldd "$work/rsuse/target/debug/rsuse" > "$work/ldd-rs.txt"
  grep -q "$libdir/libvpmm.so.1" "$work/ldd-rs.txt" ||
    { echo "FAIL: Rust program not linked to the installed library"; exit 1; }
fi
echo "ok: meson install + pkg-config suffice for the bindings"
