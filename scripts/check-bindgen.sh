#!/usr/bin/env bash
# The header's constants have a signed 32-bit type for Rust: runs bindgen,
# with its default options, over include/vpmm.h and compiles (and, with a
# built library, runs) Rust code that assigns VPMM_OK, VPMM_BACKEND_HOST and
# VPMM_REGION_LIVE to i32 and to the int32_t fields they belong in.
# Usage: scripts/check-bindgen.sh [BUILD_DIR]   (BUILD_DIR: where libvpmm.so
# and include/vpmm_version.h were built; without it only the compile check runs)
# Exit 77 (meson's SKIP) only when bindgen or rustc is not installed
# (.ci/run installs both: Debian's bindgen and rustc packages).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-}
for tool in bindgen rustc; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: $tool is not installed (apt-get install bindgen rustc)"
    exit 77
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The header as it is in the source tree (no generated vpmm_version.h):
#    what someone running bindgen over a checkout gets.
bindgen include/vpmm.h -o "$work/plain.rs"
# 2. The header as installed, beside the generated vpmm_version.h.
if [ -n "$build" ]; then
  bindgen include/vpmm.h -o "$work/full.rs" -- -I "$build/include"
  grep -q "pub const VPMM_ABI_VERSION" "$work/full.rs" ||
    { echo "FAIL: VPMM_ABI_VERSION missing with $build/include on the path"; exit 1; }
fi

# Named constants must come out as i32 (c_int) constants, never u32.
for name in VPMM_OK VPMM_ERR_TIMEOUT VPMM_BACKEND_HOST VPMM_REGION_LIVE VPMM_OPTION_SIZE VPMM_FIELD_U64; do
  grep -q "pub const $name:" "$work/plain.rs" || { echo "FAIL: bindgen emitted no $name"; exit 1; }
done

cat > "$work/check.rs" <<'RS'
// Compiles only if the constants are i32 and match the int32_t fields.
pub fn typed(cfg: &mut vpmm_config, r: &vpmm_region_info) -> i32 {
    let ok: i32 = VPMM_OK;
    let host: i32 = VPMM_BACKEND_HOST;
    let live: i32 = VPMM_REGION_LIVE;
    let timeout: vpmm_status = VPMM_ERR_TIMEOUT;
    cfg.backend = VPMM_BACKEND_HOST;
    let status: vpmm_status = ok;
    let named = match status {
        VPMM_OK => 0,
        VPMM_ERR_TIMEOUT => 1,
        _ => 2,
    };
    if r.kind == VPMM_REGION_LIVE { named + host + live + timeout } else { named }
}
pub fn kinds(o: &vpmm_option_info, f: &vpmm_field_info) -> bool {
    o.kind == VPMM_OPTION_SIZE && f.kind == VPMM_FIELD_U64
}
RS

{
  echo '#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, dead_code, deref_nullptr)]'
  cat "$work/plain.rs" "$work/check.rs"
} > "$work/lib.rs"
rustc --edition 2021 --crate-type lib -o "$work/libcheck.rlib" "$work/lib.rs"
echo "ok: bindgen constants are i32 (statuses, backends, region kinds, option and field kinds)"

# With a built library: the same constants through a real call sequence.
lib=$(ls "$build"/libvpmm.so 2>/dev/null || true)
if [ -n "$build" ] && [ -n "$lib" ]; then
  cat > "$work/main.rs" <<'RS'
fn main() {
    unsafe {
        let mut cfg: vpmm_config = std::mem::zeroed();
        vpmm_config_init_defaults(&mut cfg);
        cfg.backend = VPMM_BACKEND_HOST;
        cfg.host_capacity = 64 << 20;
        let mut pool: *mut vpmm_pool = std::ptr::null_mut();
        assert_eq!(vpmm_pool_create(&cfg, &mut pool), VPMM_OK);
        let mut p: *mut std::os::raw::c_void = std::ptr::null_mut();
        assert_eq!(vpmm_pool_malloc(pool, 4 << 20, std::ptr::null_mut(), &mut p), VPMM_OK);
        let mut regs: Vec<vpmm_region_info> = vec![std::mem::zeroed(); 16];
        regs[0].struct_size = std::mem::size_of::<vpmm_region_info>() as u32;
        let mut n: size_t = 0;  // bindgen's size_t alias (u64 or usize, by version)
        assert_eq!(vpmm_pool_dump(pool, regs.as_mut_ptr(), regs.len() as size_t, &mut n), VPMM_OK);
        assert!(regs[..(n as usize).min(16)].iter().any(|r| r.kind == VPMM_REGION_LIVE && r.va == p as u64));
        let mut changed: u64 = 99;
        assert_eq!(vpmm_pool_pause_ex(pool, std::ptr::null(), &mut changed), VPMM_OK);
        assert_eq!(changed, 0);
        let name = std::ffi::CStr::from_ptr(vpmm_status_string(VPMM_ERR_TIMEOUT));
        assert_eq!(name.to_str().unwrap(), "VPMM_ERR_TIMEOUT");
        assert_eq!(vpmm_pool_destroy(pool), VPMM_OK);
    }
    println!("ok: Rust drove a host pool through the bindgen declarations");
}
RS
  {
    echo '#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, dead_code, deref_nullptr)]'
    cat "$work/full.rs" "$work/main.rs"
  } > "$work/bin.rs"
  rustc --edition 2021 -o "$work/bin" -L "$build" -l dylib=vpmm "$work/bin.rs"
  LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/bin"
fi
