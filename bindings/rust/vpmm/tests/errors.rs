//! Every error path reachable through the safe API, and the status mapping
//! of every code: each failure is the right `Status` with the library's
//! message naming the call.
mod common;

use std::time::Duration;

use common::{host_config, host_pool, PAGE};
use vpmm::{sys, AllocAttrs, Backend, Config, Error, HostStream, Overdraft, Pool, ReserveMode, Status, Stream};

fn assert_err<T: std::fmt::Debug>(r: vpmm::Result<T>, status: Status, in_message: &str) -> Error {
    let e = r.unwrap_err();
    assert_eq!(e.status(), status, "{}", e);
    assert!(e.message().contains(in_message), "message {:?} lacks {:?}", e.message(), in_message);
    // Display carries both, and it is a std::error::Error.
    let shown = e.to_string();
    assert!(shown.contains(e.message()) && shown.contains(status.name()), "{}", shown);
    let _: &dyn std::error::Error = &e;
    e
}

#[test]
fn every_code_maps_to_its_variant_and_back() {
    let all = [
        (sys::VPMM_ERR_INVALID_ARGUMENT, Status::InvalidArgument, "VPMM_ERR_INVALID_ARGUMENT"),
        (sys::VPMM_ERR_OUT_OF_MEMORY, Status::OutOfMemory, "VPMM_ERR_OUT_OF_MEMORY"),
        (sys::VPMM_ERR_UNKNOWN_POINTER, Status::UnknownPointer, "VPMM_ERR_UNKNOWN_POINTER"),
        (sys::VPMM_ERR_WRONG_STATE, Status::WrongState, "VPMM_ERR_WRONG_STATE"),
        (sys::VPMM_ERR_UNSUPPORTED, Status::Unsupported, "VPMM_ERR_UNSUPPORTED"),
        (sys::VPMM_ERR_BACKEND, Status::Backend, "VPMM_ERR_BACKEND"),
        (sys::VPMM_ERR_INTERNAL, Status::Internal, "VPMM_ERR_INTERNAL"),
        (sys::VPMM_ERR_TIMEOUT, Status::Timeout, "VPMM_ERR_TIMEOUT"),
    ];
    for (code, status, name) in all {
        assert_eq!(Status::from_code(code), Some(status));
        assert_eq!(status.code(), code);
        assert_eq!(status.name(), name);
    }
    assert_eq!(Status::from_code(sys::VPMM_OK), None);
    assert_eq!(Status::from_code(42), Some(Status::Other(42)));
    assert_eq!(Status::Other(42).code(), 42);
    assert_eq!(Status::Other(42).name(), "VPMM_ERR_UNKNOWN");
}

#[test]
fn invalid_argument() {
    let pool = host_pool();
    assert_err(pool.malloc(0, Stream::DEFAULT), Status::InvalidArgument, "vpmm_pool_malloc");
    assert_err(pool.alloc(u64::MAX), Status::InvalidArgument, "vpmm_pool_malloc");
    let long = "t".repeat(64);
    assert_err(
        pool.alloc_with(PAGE, Stream::DEFAULT, &AllocAttrs::new().tag(&long)),
        Status::InvalidArgument,
        "vpmm_pool_malloc_ex",
    );
    assert_err(pool.tag_stats(Some("never-used")), Status::InvalidArgument, "never-used");
    assert_err(pool.pause(Some("never-used")), Status::InvalidArgument, "never-used");
    assert_err(pool.reserve(0), Status::InvalidArgument, "vpmm_pool_reserve");
    assert_err(vpmm::Region::push(&long, false), Status::InvalidArgument, "vpmm_region_push");
    // Caught on the Rust side: a C string cannot hold a NUL.
    assert_err(pool.tag_stats(Some("a\0b")), Status::InvalidArgument, "NUL");
    // A page size that is not a multiple of the host granularity.
    assert_err(Pool::new(&host_config(64).page_size(1000)), Status::InvalidArgument, "page");
}

#[test]
fn invalid_argument_from_a_malformed_environment_variable() {
    // Only this test reads the environment (the others use Config::defaults).
    std::env::set_var("VPMM_PAGE_SIZE", "twelve");
    let from_env = Config::from_env().backend(Backend::Host);
    let defaults = Config::defaults().backend(Backend::Host);
    std::env::remove_var("VPMM_PAGE_SIZE");
    assert_ne!(from_env.as_raw().config_error, 0);
    assert_eq!(defaults.as_raw().config_error, 0);
    assert_err(Pool::new(&from_env), Status::InvalidArgument, "VPMM_PAGE_SIZE");
    Pool::new(&defaults).unwrap();
}

#[test]
fn out_of_memory_under_a_limit() {
    let pool = Pool::new(&host_config(256).memory_limit(8 * PAGE)).unwrap();
    let _a = pool.alloc(6 * PAGE).unwrap();
    assert_err(pool.alloc(4 * PAGE), Status::OutOfMemory, "vpmm_pool_malloc");
    assert_err(pool.reserve(4 * PAGE), Status::OutOfMemory, "vpmm_pool_reserve");
    assert_eq!(pool.stats().n_oom, 1);
}

#[test]
fn unknown_pointer() {
    let pool = host_pool();
    let buf = pool.alloc(2 * PAGE).unwrap();
    let bogus = 0x1000 as *mut std::os::raw::c_void;
    assert_err(pool.lookup(bogus), Status::UnknownPointer, "vpmm_pool_lookup");
    assert_err(unsafe { pool.free(bogus, Stream::DEFAULT) }, Status::UnknownPointer, "vpmm_pool_free");
    // An interior pointer is found by lookup but cannot be freed.
    let inner = (buf.addr() + 64) as *mut std::os::raw::c_void;
    assert_eq!(pool.lookup(inner).unwrap().0, buf.as_ptr());
    assert_err(unsafe { pool.free(inner, Stream::DEFAULT) }, Status::UnknownPointer, "vpmm_pool_free");
    // A raw pointer freed twice.
    let p = pool.malloc(PAGE, Stream::DEFAULT).unwrap();
    unsafe { pool.free(p, Stream::DEFAULT) }.unwrap();
    assert_err(unsafe { pool.free(p, Stream::DEFAULT) }, Status::UnknownPointer, "vpmm_pool_free");
    buf.free().unwrap();
}

#[test]
fn wrong_state() {
    let pool = host_pool();
    let _live = pool.alloc(8 * PAGE).unwrap();
    assert_err(pool.set_limit(2 * PAGE), Status::WrongState, "vpmm_pool_set_limit");
    pool.set_limit(16 * PAGE).unwrap();
    let stream = HostStream::new().unwrap();
    let _hold = stream.hold().unwrap();
    assert_err(stream.synchronize(), Status::WrongState, "");
    assert_err(pool.synchronize(stream.stream()), Status::WrongState, "");
}

#[test]
fn unsupported_backend() {
    // No HIP backend is built on the CPU-only machines that run these tests;
    // with one and an AMD GPU this pool would be created instead.
    let e = Pool::new(&Config::defaults().backend(Backend::Hip)).unwrap_err();
    assert_eq!(e.status(), Status::Unsupported, "{}", e);
    assert!(!e.message().is_empty());
}

#[test]
fn timeout_of_a_blocking_reservation() {
    let pool = Pool::new(&host_config(256).memory_limit(8 * PAGE)).unwrap();
    let held = pool.reserve(8 * PAGE).unwrap();
    let start = std::time::Instant::now();
    assert_err(
        pool.reserve_with(PAGE, ReserveMode::Block, Overdraft::Fail, Some(Duration::from_millis(20))),
        Status::Timeout,
        "vpmm_pool_reserve",
    );
    assert!(start.elapsed() >= Duration::from_millis(15));
    drop(held);
    let r = pool.reserve_with(PAGE, ReserveMode::Block, Overdraft::Fail, Some(Duration::from_millis(20))).unwrap();
    assert_eq!(r.size().unwrap(), PAGE);
}

#[test]
fn errors_are_per_thread_and_survive_later_calls() {
    let pool = host_pool();
    let e = pool.malloc(0, Stream::DEFAULT).unwrap_err();
    let _ok = pool.alloc(PAGE).unwrap(); // a later success does not change e
    assert!(e.message().contains("size 0"), "{}", e);
    std::thread::scope(|s| {
        s.spawn(|| {
            let e2 = pool.lookup(std::ptr::null()).unwrap_err();
            assert_ne!(e2.message(), e.message());
        });
    });
}
