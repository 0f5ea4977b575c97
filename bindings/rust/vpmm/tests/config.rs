//! The Config builder sets every field of vpmm_config, keeps the library's
//! defaults elsewhere, and the pool reports what it resolved.
mod common;

use common::PAGE;
use vpmm::{Backend, Config, Pool, HANDLE_SIZE_UNLIMITED};

#[test]
fn every_setter_sets_its_field() {
    let c = Config::defaults()
        .backend(Backend::Host)
        .device(3)
        .page_size(2 * PAGE)
        .va_size(1 << 30)
        .initial_pages(5)
        .host_capacity(1 << 28)
        .max_handle_size(HANDLE_SIZE_UNLIMITED)
        .small_size(4096)
        .backup_cache_size(1 << 20)
        .memory_limit(1 << 27)
        .memory_limit_fraction(0.5)
        .watermark_trigger(0.9)
        .watermark_stop(0.3)
        .backup_pinned_limit(1 << 21);
    let r = c.as_raw();
    assert_eq!(r.struct_size as usize, std::mem::size_of::<vpmm::sys::vpmm_config>());
    assert_eq!((r.backend, r.device, r.config_error), (vpmm::sys::VPMM_BACKEND_HOST, 3, 0));
    assert_eq!((r.page_size, r.va_size, r.initial_pages), (2 * PAGE, 1 << 30, 5));
    assert_eq!((r.host_capacity, r.max_handle_size, r.small_size), (1 << 28, u64::MAX, 4096));
    assert_eq!((r.backup_cache_size, r.memory_limit, r.backup_pinned_limit), (1 << 20, 1 << 27, 1 << 21));
    assert_eq!((r.memory_limit_fraction, r.watermark_trigger, r.watermark_stop), (0.5, 0.9, 0.3));
    assert_eq!(c.get_backend(), Some(Backend::Host));
    // Debug names every field.
    let shown = format!("{:?}", c);
    for field in ["page_size", "max_handle_size", "watermark_stop", "backup_pinned_limit"] {
        assert!(shown.contains(field), "{}", shown);
    }
}

#[test]
fn the_pool_resolves_and_reports_its_configuration() {
    let pool = Pool::new(
        &Config::defaults()
            .backend(Backend::Host)
            .page_size(PAGE)
            .initial_pages(3)
            .memory_limit(32 * PAGE),
    )
    .unwrap();
    let got = pool.config().unwrap();
    let r = got.as_raw();
    assert_eq!(got.get_backend(), Some(Backend::Host));
    assert_eq!((r.page_size, r.initial_pages, r.memory_limit), (PAGE, 3, 32 * PAGE));
    assert!(r.va_size > 0, "va_size 0 resolved to the backend default");
    assert_eq!(pool.backend_name(), "host");
    assert_eq!(pool.stats().capacity_bytes, 32 * PAGE);
    assert_eq!(vpmm::abi_version(), 1);
}

#[test]
fn backend_codes_round_trip() {
    for b in [Backend::Auto, Backend::Cuda, Backend::Hip, Backend::Host] {
        assert_eq!(Backend::from_code(b.code()), Some(b));
    }
    assert_eq!(Backend::from_code(-1), None);
}

/// `Backend` against the library's one table of the kinds' names
/// (`vpmm_backend_kind_name`, listed by asking for 0, 1, ... until NULL): a
/// kind the library gains without its variant, or a variant the library does
/// not name, fails.
#[test]
fn backend_variants_are_the_library_kinds() {
    let mut kinds = 0;
    while !unsafe { vpmm::sys::vpmm_backend_kind_name(kinds) }.is_null() {
        let b = Backend::from_code(kinds).unwrap_or_else(|| panic!("library kind {} has no Backend", kinds));
        assert_eq!(b.code(), kinds);
        assert!(!b.name().is_empty());
        kinds += 1;
    }
    let variants = [Backend::Auto, Backend::Cuda, Backend::Hip, Backend::Host];
    assert_eq!(variants.len() as i32, kinds, "Backend's variants against the library's kinds");
    for b in variants {
        assert!(b.code() < kinds, "{:?} is no kind of the library", b);
    }
    assert_eq!(Backend::Host.name(), "host");
    let pool = Pool::new(&Config::defaults().backend(Backend::Host).page_size(PAGE)).unwrap();
    assert_eq!(pool.backend_name(), Backend::Host.name());
}
