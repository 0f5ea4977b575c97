#!/usr/bin/env bash
# What the README and docs/building.md ("Installing", "Rust", "Go") promise
# about an installed libvpmm, checked the way a user meets it: `meson install`
# into a prefix (here a temporary DESTDIR, which works because vpmm.pc is
# relocatable: prefix=${pcfiledir}/../..), then, outside the source tree and
# WITHOUT LD_LIBRARY_PATH:
#   - the installed `vpmm` command runs (its RUNPATH is $ORIGIN/../lib/...);
#   - C programs built with `cc ... $(pkg-config --cflags --libs vpmm)` run
#     (vpmm.pc's Libs carry -Wl,-rpath,${libdir} outside /usr): one of this
#     script's and the README's ```c tested block;
#   - Go programs importing the Go package (`#cgo pkg-config: vpmm`), with
#     the README's go.mod (require + replace), run: one of this script's and
#     the README's (bindings/go/examples/quickstart/main.go);
#   - Cargo programs using vpmm-sys by its C names and the vpmm crate, with
#     docs/building.md's build.rs (an rpath from DEP_VPMM_LIB_DIR), run: one
#     of this script's and the README's (bindings/rust/vpmm/examples/quickstart.rs);
# and each program is linked against the installed libvpmm.so.1, never the
# in-tree one. The README's programs run on the host backend (VPMM_BACKEND=host:
# a GPU machine's busy device must not decide this test). A prefix of /usr gets no rpath (the loader looks there): then
# the programs run with LD_LIBRARY_PATH, as they would after ldconfig.
# Usage: scripts/check-bindings-install.sh BUILD_DIR
# Go and Rust parts are skipped (said on a line) when go or cargo is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
command -v pkg-config >/dev/null 2>&1 || { echo "FAIL: pkg-config is missing"; exit 1; }
cc=${CC:-cc}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dest="$work/root"
meson install -C "$build" --no-rebuild --destdir "$dest" --quiet >/dev/null
pc=$(find "$dest" -name vpmm.pc -path '*pkgconfig*' | head -n1)
[ -n "$pc" ] || { echo "FAIL: no vpmm.pc installed"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
unset PKG_CONFIG_SYSROOT_DIR VPMM_LIB_DIR VPMM_NO_PKG_CONFIG CGO_CFLAGS CGO_LDFLAGS LD_LIBRARY_PATH
libdir=$(cd "$(dirname "$(find "$dest" -name libvpmm.so.1 | head -n1)")" && pwd)
run=(env)
if ! grep -q '^prefix=${pcfiledir}' "$pc"; then
  # A build directory configured before vpmm.pc became relocatable (meson
  # applies default_options at the first setup only): its paths name the
  # real prefix, so the DESTDIR copy is reached through the sysroot and the
  # loader path.
  echo "note: $build has pkgconfig.relocatable=false (configured before it became the default):" \
       "the programs are checked with PKG_CONFIG_SYSROOT_DIR and LD_LIBRARY_PATH"
  export PKG_CONFIG_SYSROOT_DIR="$dest"
  run=(env "LD_LIBRARY_PATH=$libdir")
fi
libs=$(pkg-config --libs vpmm)
echo "installed: vpmm $(pkg-config --modversion vpmm); pkg-config --libs vpmm: $libs"
if [[ "$libs" != *"-Wl,-rpath,"* ]]; then
  echo "note: vpmm.pc has no rpath (prefix /usr): the programs run with LD_LIBRARY_PATH, as after ldconfig"
  run=(env "LD_LIBRARY_PATH=$libdir")
fi
fail() { echo "FAIL: $*"; exit 1; }
# The program must load the installed library (the same file, whichever
# path spells it). ldd's output goes to a file first: grep closing the pipe
# early would fail under pipefail.
linked_to_install() {  # WHAT PROGRAM
  "${run[@]}" ldd "$2" > "$work/ldd.txt"
  local got
  got=$(sed -n 's|^[[:space:]]*libvpmm\.so\.1 => \([^ ]*\) .*|\1|p' "$work/ldd.txt")
  [ -n "$got" ] && [ "$(readlink -f "$got")" = "$(readlink -f "$libdir/libvpmm.so.1")" ] ||
    fail "$1 does not load $libdir/libvpmm.so.1: $(cat "$work/ldd.txt")"
}

# -- the installed command -------------------------------------------------------
tool=$(find "$dest" -path '*/bin/vpmm' -type f | head -n1)
[ -n "$tool" ] || fail "no vpmm command installed"
(cd "$work" && env -u LD_LIBRARY_PATH "${run[@]}" "$tool" replay --backend host --summary "$root/traces/training.trace" > "$work/tool.out") ||
  fail "the installed vpmm command does not run: $(cat "$work/tool.out")"
linked_to_install "the vpmm command" "$tool"
echo "ok: the installed vpmm command runs ($("${run[@]}" "$tool" version))"

# -- C ---------------------------------------------------------------------------
mkdir "$work/cuse"
cat > "$work/cuse/main.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <vpmm.h>
int main(void) {
  vpmm_config cfg;
  vpmm_config_init_defaults(&cfg);
  cfg.backend = VPMM_BACKEND_HOST;
  vpmm_pool* pool = NULL;
  if (vpmm_pool_create(&cfg, &pool) != VPMM_OK) { fprintf(stderr, "%s\n", vpmm_last_error()); return 1; }
  vpmm_alloc_attrs a; /* zeroed, then set: the struct only grows */
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.flags = VPMM_ALLOC_HOST_BACKUP;
  a.tag = "weights";
  void* p = NULL;
  if (vpmm_pool_malloc_ex(pool, 4u << 20, NULL, &a, &p) != VPMM_OK ||
      vpmm_pool_pause(pool, "weights") != VPMM_OK || vpmm_pool_resume(pool, "weights") != VPMM_OK ||
      vpmm_pool_free(pool, p, NULL) != VPMM_OK) {
    fprintf(stderr, "%s\n", vpmm_last_error());
    return 1;
  }
  vpmm_pool_destroy(pool);
  printf("ok: C program built with pkg-config against libvpmm %s\n", vpmm_version());
  return 0;
}
C
# shellcheck disable=SC2046
(cd "$work/cuse" && $cc -std=c99 -Wall -Wextra -Werror main.c -o cuse $(pkg-config --cflags --libs vpmm)) ||
  fail "the C program does not build"
"${run[@]}" "$work/cuse/cuse" || fail "the C program does not run"
linked_to_install "the C program" "$work/cuse/cuse"
awk '/^```c tested$/ {code = 1; next} code && /^```$/ {exit} code {print}' "$root/README.md" > "$work/cuse/readme.c"
[ -s "$work/cuse/readme.c" ] || fail "no \`\`\`c tested block in README.md"
# shellcheck disable=SC2046
(cd "$work/cuse" && $cc -std=c99 -Wall -Wextra -Werror readme.c -o readme $(pkg-config --cflags --libs vpmm)) ||
  fail "the README's C program does not build"
"${run[@]}" VPMM_BACKEND=host "$work/cuse/readme" || fail "the README's C program does not run"
linked_to_install "the README's C program" "$work/cuse/readme"

# -- Go --------------------------------------------------------------------------
if command -v go >/dev/null 2>&1; then
  mkdir "$work/gouse"
  # The README's go.mod: require (the module's version for Go's module
  # graph) and replace (where it is); the replace alone fails with "module vpmm
  # provides package vpmm and is replaced but not required".
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
  # A cache of its own: go's build cache does not key the package on what
  # pkg-config returns, and a package built by an earlier run would link
  # against that run's (deleted) DESTDIR.
  (cd "$work/gouse" && GOCACHE="$work/gocache" GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local \
    go build -o gouse .) || fail "the Go program does not build"
  "${run[@]}" "$work/gouse/gouse" || fail "the Go program does not run"
  linked_to_install "the Go program" "$work/gouse/gouse"
  mkdir "$work/goquick"
  sed 's/^module gouse$/module goquick/' "$work/gouse/go.mod" > "$work/goquick/go.mod"
  cp "$root/bindings/go/examples/quickstart/main.go" "$work/goquick/main.go"
  (cd "$work/goquick" && GOCACHE="$work/gocache" GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local \
    go build -o goquick .) || fail "the README's Go program does not build"
  "${run[@]}" VPMM_BACKEND=host "$work/goquick/goquick" || fail "the README's Go program does not run"
  linked_to_install "the README's Go program" "$work/goquick/goquick"
else
  echo "skipped: Go (go is not installed: apt-get install golang-go)"
fi

# -- Rust ------------------------------------------------------------------------
if command -v cargo >/dev/null 2>&1 && command -v rustc >/dev/null 2>&1; then
  mkdir -p "$work/rsuse/src"
  cat > "$work/rsuse/Cargo.toml" <<TOML
[package]
name = "rsuse"
version = "0.1.0"
edition = "2021"
build = "build.rs"

[dependencies]
vpmm-sys = { path = "$root/bindings/rust/vpmm-sys" }
vpmm = { path = "$root/bindings/rust/vpmm" }

[workspace]
TOML
  # docs/building.md's build.rs: vpmm-sys (links = "vpmm") reports the directory it
  # linked from; a RUNPATH to it lets the program run without LD_LIBRARY_PATH.
  cat > "$work/rsuse/build.rs" <<'RS'
fn main() {
    if let Ok(dir) = std::env::var("DEP_VPMM_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
}
RS
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
  mkdir "$work/rsuse/src/bin"  # a second program of the crate: the README's
  cp "$root/bindings/rust/vpmm/examples/quickstart.rs" "$work/rsuse/src/bin/quickstart.rs"
  (cd "$work/rsuse" && CARGO_TARGET_DIR="$work/rsuse/target" cargo build --offline -q) ||
    fail "the Rust programs do not build"
  "${run[@]}" "$work/rsuse/target/debug/rsuse" || fail "the Rust program does not run"
  linked_to_install "the Rust program" "$work/rsuse/target/debug/rsuse"
  "${run[@]}" VPMM_BACKEND=host "$work/rsuse/target/debug/quickstart" || fail "the README's Rust program does not run"
  linked_to_install "the README's Rust program" "$work/rsuse/target/debug/quickstart"
else
  echo "skipped: Rust (cargo or rustc is not installed: apt-get install cargo)"
fi
echo "ok: meson install + pkg-config suffice for C, Go and Rust programs (the README's among them) and the vpmm command"
