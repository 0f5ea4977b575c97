//! Shared by the integration tests: host pools and the seed notation.
#![allow(dead_code)]
use vpmm::{Backend, Config, Pool};

pub const PAGE: u64 = 64 << 10;

/// A host-backend pool of 64 KiB pages, independent of VPMM_* variables.
pub fn host_config(va_pages: u64) -> Config {
    Config::defaults()
        .backend(Backend::Host)
        .page_size(PAGE)
        .va_size(va_pages * PAGE)
        .host_capacity(64 << 20)
}

pub fn host_pool() -> Pool {
    Pool::new(&host_config(256)).expect("host pool")
}

/// The pool's layout in the seed notation, sizes in pages:
/// "[4][*6][1][11][*42]".
pub fn layout(pool: &Pool) -> String {
    let page = pool.stats().page_size;
    pool.regions()
        .unwrap()
        .iter()
        .map(|r| format!("[{}{}]", r.kind.mark(), r.size / page))
        .collect()
}

/// A pattern that differs per byte and per seed.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9u32 ^ u32::from(seed).wrapping_mul(0x0100_0193);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}
