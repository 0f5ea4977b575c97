//! Host-backend streams (`include/vpmm_host_streams.h`), for tests and for
//! modelling a GPU on the host backend (as `vpmm replay --gpu-lag` does):
//! they drive the host backend the way a GPU program drives CUDA streams. A
//! program that only allocates never needs them.
use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use vpmm_sys as sys;

use crate::error::{check, Result};
use crate::stream::Stream;

/// A host stream: work queued on it runs in order on a worker thread; a
/// held stream runs nothing until released, so its events stay pending (the
/// way a test keeps "GPU work" in flight). Drained and destroyed on drop.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// let stream = vpmm::HostStream::new().unwrap();
/// let ran = Arc::new(AtomicBool::new(false));
/// let flag = ran.clone();
/// {
///     let _hold = stream.hold().unwrap();
///     stream.launch(move || flag.store(true, Ordering::SeqCst)).unwrap();
///     assert!(!ran.load(Ordering::SeqCst)); // held: nothing runs
/// }
/// stream.synchronize().unwrap();
/// assert!(ran.load(Ordering::SeqCst));
/// ```
#[derive(Debug)]
pub struct HostStream {
    raw: sys::vpmm_stream,
}

// SAFETY: host streams are thread safe (the header says so).
unsafe impl Send for HostStream {}
unsafe impl Sync for HostStream {}

/// A hold on a [`HostStream`] (`vpmm_host_stream_hold`), released on drop.
#[derive(Debug)]
pub struct Hold<'s> {
    stream: &'s HostStream,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard's hold is still counted on the stream.
        unsafe { sys::vpmm_host_stream_release(self.stream.raw) };
    }
}

type Task = Box<dyn FnOnce() + Send + 'static>;

unsafe extern "C" fn run_task(user: *mut c_void) {
    let task = Box::from_raw(user as *mut Task);
    // A panic must not unwind into the stream's C++ worker thread; the panic
    // hook has already reported it.
    let _ = catch_unwind(AssertUnwindSafe(task));
}

impl HostStream {
    /// Creates a stream (`vpmm_host_stream_create`).
    pub fn new() -> Result<HostStream> {
        let mut raw: sys::vpmm_stream = ptr::null_mut();
        check(unsafe { sys::vpmm_host_stream_create(&mut raw) })?;
        Ok(HostStream { raw })
    }

    /// The stream handle, to pass to a host-backend pool.
    pub fn stream(&self) -> Stream {
        // SAFETY: live until self is dropped.
        unsafe { Stream::from_raw(self.raw) }
    }

    /// Holds the stream until the returned guard is dropped. Holds nest.
    pub fn hold(&self) -> Result<Hold<'_>> {
        check(unsafe { sys::vpmm_host_stream_hold(self.raw) })?;
        Ok(Hold { stream: self })
    }

    /// Queues `f` on the stream (a host "kernel"); it runs on the stream's
    /// worker thread after everything queued before it. A panic in `f` is
    /// caught there (and reported by the panic hook).
    pub fn launch<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<()> {
        let task: *mut Task = Box::into_raw(Box::new(Box::new(f) as Task));
        let st = unsafe { sys::vpmm_host_stream_launch(self.raw, Some(run_task), task as *mut c_void) };
        if st != sys::VPMM_OK {
            // Not queued: the task is still ours to free.
            drop(unsafe { Box::from_raw(task) });
        }
        check(st)
    }

    /// Blocks until everything queued has run. Errors: `WrongState` when
    /// the stream is held (it would never finish).
    pub fn synchronize(&self) -> Result<()> {
        check(unsafe { sys::vpmm_host_stream_synchronize(self.raw) })
    }
}

impl Drop for HostStream {
    fn drop(&mut self) {
        // SAFETY: owned; pools that saw the stream must not use it afterwards
        // (documented in the header).
        unsafe { sys::vpmm_host_stream_destroy(self.raw) };
    }
}
