//! `Stream`: a backend stream handle, and `PoolStream`, one the pool made.
use std::ptr;

use vpmm_sys as sys;

use crate::error::{check, Result};
use crate::pool::Pool;

/// A stream of the pool's backend: a `CUstream`/`cudaStream_t` (CUDA), a
/// `hipStream_t` (HIP) or a host stream (host backend). A plain handle: the
/// pool never owns it. [`Stream::DEFAULT`] is the backend's default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stream(sys::vpmm_stream);

// SAFETY: a stream handle is an opaque token the library and the drivers
// accept from any thread.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

impl Stream {
    /// The backend's default stream (NULL in C).
    pub const DEFAULT: Stream = Stream(ptr::null_mut());

    /// A stream from a raw handle (a `CUstream` from another library, say).
    ///
    /// # Safety
    /// `raw` must be NULL or a live stream of the pool's backend for as long
    /// as the pool uses it.
    pub unsafe fn from_raw(raw: sys::vpmm_stream) -> Stream {
        Stream(raw)
    }

    /// The raw handle.
    pub fn as_raw(self) -> sys::vpmm_stream {
        self.0
    }
}

impl Default for Stream {
    /// [`Stream::DEFAULT`].
    fn default() -> Stream {
        Stream::DEFAULT
    }
}

/// A stream made by the pool's backend (`vpmm_pool_stream_create`),
/// retired and destroyed on drop (`vpmm_pool_stream_destroy`).
///
/// ```
/// # let pool = vpmm::Pool::new(&vpmm::Config::defaults().backend(vpmm::Backend::Host)).unwrap();
/// let stream = pool.create_stream().unwrap();
/// let buf = pool.alloc_on(4096, stream.stream()).unwrap();
/// drop(buf); // freed in the order of `stream`
/// pool.synchronize(stream.stream()).unwrap();
/// ```
#[derive(Debug)]
pub struct PoolStream<'p> {
    pool: &'p Pool,
    stream: Stream,
}

impl<'p> PoolStream<'p> {
    pub(crate) fn create(pool: &'p Pool) -> Result<PoolStream<'p>> {
        let mut raw: sys::vpmm_stream = ptr::null_mut();
        // SAFETY: valid pool, writable out-parameter.
        check(unsafe { sys::vpmm_pool_stream_create(pool.as_raw(), &mut raw) })?;
        Ok(PoolStream { pool, stream: Stream(raw) })
    }

    /// The stream handle, to pass to allocations.
    pub fn stream(&self) -> Stream {
        self.stream
    }
}

impl Drop for PoolStream<'_> {
    fn drop(&mut self) {
        // SAFETY: the stream came from this pool and is destroyed once.
        let _ = unsafe { sys::vpmm_pool_stream_destroy(self.pool.as_raw(), self.stream.0) };
    }
}
