//! The OOM and pressure callbacks: Rust closures behind C trampolines.
//!
//! The pool registers one trampoline per kind with `user` pointing at the
//! pool's `Callbacks` (a heap block that lives as long as the pool). The
//! closure itself sits in an `Arc` under a mutex: the trampoline clones it and
//! drops the lock before calling, so a closure may replace or clear itself
//! (or call anything else on the pool) while it runs.
//!
//! A panic never crosses the FFI boundary: the trampoline catches it, reports
//! "no retry" to the library, and parks the payload in a thread-local slot;
//! the wrapper of the library call that ran the callback (on the same thread)
//! resumes it once the C call has returned.
use std::any::Any;
use std::cell::RefCell;
use std::mem::ManuallyDrop;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use vpmm_sys as sys;

use crate::pool::Pool;

pub(crate) type OomFn = dyn Fn(&Pool, u64) -> bool + Send + Sync;
pub(crate) type PressureFn = dyn Fn(&Pool, Pressure) + Send + Sync;

/// What the pressure callback is told: the pool crossed a watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pressure {
    /// `true` when mapped bytes crossed the trigger watermark upward,
    /// `false` when they fell to the stop watermark.
    pub under_pressure: bool,
    /// The pool's mapped bytes at that moment.
    pub mapped_bytes: u64,
}

#[derive(Default)]
pub(crate) struct Callbacks {
    pub(crate) oom: Mutex<Option<Arc<OomFn>>>,
    pub(crate) pressure: Mutex<Option<Arc<PressureFn>>>,
}

thread_local! {
    static PENDING_PANIC: RefCell<Option<Box<dyn Any + Send + 'static>>> = RefCell::new(None);
}

fn park_panic(payload: Box<dyn Any + Send + 'static>) {
    PENDING_PANIC.with(|p| {
        let mut slot = p.borrow_mut();
        // The first panic wins; later ones (a retried callback) are dropped.
        if slot.is_none() {
            *slot = Some(payload);
        }
    });
}

/// Resumes a panic parked by a callback on this thread, if any.
pub(crate) fn resume_pending_panic() {
    if let Some(payload) = take_pending_panic() {
        resume_unwind(payload);
    }
}

/// Takes a panic parked by a callback on this thread, if any.
pub(crate) fn take_pending_panic() -> Option<Box<dyn Any + Send + 'static>> {
    PENDING_PANIC.with(|p| p.borrow_mut().take())
}

/// Drops a parked panic without resuming it (for destructors, which must not
/// unwind while the thread is already unwinding).
pub(crate) fn discard_pending_panic() {
    PENDING_PANIC.with(|p| p.borrow_mut().take());
}

fn lock<T: Clone>(m: &Mutex<Option<T>>) -> Option<T> {
    match m.lock() {
        Ok(g) => g.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// A `Pool` that borrows the C pool of a callback without owning it.
fn view(pool: *mut sys::vpmm_pool, user: *mut c_void) -> Option<ManuallyDrop<Pool>> {
    let raw = NonNull::new(pool)?;
    // SAFETY: user is the pool's Callbacks block, alive while the pool is.
    Some(ManuallyDrop::new(unsafe { Pool::borrowed(raw, user as *mut Callbacks) }))
}

pub(crate) unsafe extern "C" fn oom_trampoline(
    pool: *mut sys::vpmm_pool,
    bytes: u64,
    user: *mut c_void,
) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let callbacks = &*(user as *const Callbacks);
        let f = match lock(&callbacks.oom) {
            Some(f) => f,
            None => return false,
        };
        match view(pool, user) {
            Some(p) => f(&p, bytes),
            None => false,
        }
    }));
    match result {
        Ok(retry) => retry as c_int,
        Err(payload) => {
            park_panic(payload);
            0
        }
    }
}

pub(crate) unsafe extern "C" fn pressure_trampoline(
    pool: *mut sys::vpmm_pool,
    under_pressure: c_int,
    mapped_bytes: u64,
    user: *mut c_void,
) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let callbacks = &*(user as *const Callbacks);
        if let (Some(f), Some(p)) = (lock(&callbacks.pressure), view(pool, user)) {
            f(&p, Pressure { under_pressure: under_pressure != 0, mapped_bytes });
        }
    }));
    if let Err(payload) = result {
        park_panic(payload);
    }
}
