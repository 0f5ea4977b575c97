//! OOM and pressure callbacks as Rust closures; panics stay on the Rust side.
mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::{host_config, PAGE};
use vpmm::{AllocAttrs, Pool, Status, Stream};

#[test]
fn oom_callback_pauses_and_the_allocation_is_retried() {
    let pool = Pool::new(&host_config(256).memory_limit(8 * PAGE)).unwrap();
    let scratch = pool.alloc_with(6 * PAGE, Stream::DEFAULT, &AllocAttrs::new().tag("scratch")).unwrap();
    let asked = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&asked);
    pool.set_oom_callback(move |pool, bytes| {
        seen.store(bytes, Ordering::SeqCst);
        // The callback may call back into the pool: free room by pausing.
        pool.pause(Some("scratch")).unwrap()
    })
    .unwrap();
    let big = pool.alloc(4 * PAGE).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 4 * PAGE);
    let st = pool.stats();
    assert_eq!((st.n_oom_recovered, st.paused_bytes), (1, 6 * PAGE));
    drop(big);
    pool.clear_oom_callback().unwrap();
    assert!(pool.resume(Some("scratch")).unwrap());
    assert_eq!(pool.alloc(4 * PAGE).unwrap_err().status(), Status::OutOfMemory);
    drop(scratch);
}

#[test]
fn oom_callback_declining_lets_the_call_fail() {
    let pool = Pool::new(&host_config(256).memory_limit(4 * PAGE)).unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let c = Arc::clone(&calls);
    pool.set_oom_callback(move |_, _| {
        c.fetch_add(1, Ordering::SeqCst);
        false
    })
    .unwrap();
    assert_eq!(pool.alloc(8 * PAGE).unwrap_err().status(), Status::OutOfMemory);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_panicking_oom_callback_resumes_on_the_caller_side() {
    let pool = Pool::new(&host_config(256).memory_limit(4 * PAGE)).unwrap();
    pool.set_oom_callback(|_, bytes| panic!("no memory for {}", bytes)).unwrap();
    let caught = catch_unwind(AssertUnwindSafe(|| pool.alloc(8 * PAGE).map(|_| ())));
    let payload = caught.unwrap_err();
    let msg = payload.downcast_ref::<String>().unwrap();
    assert_eq!(msg, &format!("no memory for {}", 8 * PAGE));
    // The pool is intact and usable afterwards.
    pool.check().unwrap();
    pool.clear_oom_callback().unwrap();
    let _b = pool.alloc(2 * PAGE).unwrap();
}

#[test]
fn pressure_callback_sees_both_crossings() {
    let config = host_config(256).memory_limit(10 * PAGE).watermark_trigger(0.5).watermark_stop(0.2);
    let pool = Pool::new(&config).unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = Arc::clone(&events);
    pool.set_pressure_callback(move |_, p| ev.lock().unwrap().push(p)).unwrap();
    let a = pool.alloc(6 * PAGE).unwrap();
    drop(a);
    pool.trim(0).unwrap();
    let got = events.lock().unwrap().clone();
    assert!(!got.is_empty(), "no pressure event");
    assert!(got[0].under_pressure);
    assert!(got[0].mapped_bytes >= 5 * PAGE);
    let last = got.last().unwrap();
    assert!(!last.under_pressure, "{:?}", got);
    assert!(last.mapped_bytes <= 2 * PAGE);
    // Replacing a callback from inside another is allowed.
    pool.set_pressure_callback(|pool, _| {
        pool.clear_pressure_callback().unwrap();
    })
    .unwrap();
    let _b = pool.alloc(6 * PAGE).unwrap();
}

#[test]
fn a_panicking_pressure_callback_resumes_on_the_caller_side() {
    let config = host_config(256).memory_limit(10 * PAGE).watermark_trigger(0.5).watermark_stop(0.2);
    let pool = Pool::new(&config).unwrap();
    pool.set_pressure_callback(|_, _| panic!("pressure")).unwrap();
    let caught = catch_unwind(AssertUnwindSafe(|| pool.alloc(6 * PAGE).map(|_| ())));
    assert_eq!(*caught.unwrap_err().downcast_ref::<&str>().unwrap(), "pressure");
    // The allocation succeeded, but its Buffer was never made: it was freed
    // before the panic resumed, so nothing leaks.
    pool.check().unwrap();
    assert_eq!(pool.stats().n_live, 0);
    assert_eq!(pool.stats().n_free, 1);
}
