//! `Buffer` (an owning allocation) and `AllocAttrs` (its attributes).
use std::fmt;
use std::os::raw::c_void;
use std::ptr;

use vpmm_sys as sys;

use crate::callback;
use crate::error::Result;
use crate::pool::Pool;
use crate::reservation::Reservation;
use crate::stream::Stream;

/// An allocation of a [`Pool`], freed on drop on the stream it was
/// allocated on (`vpmm_pool_free`): work queued on that stream before the
/// drop may still use the memory.
///
/// The memory is device memory; only on the host backend may the CPU touch
/// it ([`Buffer::host_slice`]).
pub struct Buffer<'p> {
    pool: &'p Pool,
    ptr: *mut c_void,
    size: u64,
    stream: Stream,
}

// SAFETY: a device address plus a shared reference to a Sync pool.
unsafe impl Send for Buffer<'_> {}
unsafe impl Sync for Buffer<'_> {}

impl<'p> Buffer<'p> {
    pub(crate) fn new(pool: &'p Pool, ptr: *mut c_void, size: u64, stream: Stream) -> Buffer<'p> {
        Buffer { pool, ptr, size, stream }
    }

    /// The device pointer.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// The device address as an integer.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// The size asked for, in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The stream the buffer was allocated on and will be freed on.
    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// The pool the buffer belongs to.
    pub fn pool(&self) -> &'p Pool {
        self.pool
    }

    /// The buffer's bytes, read from the CPU.
    ///
    /// # Safety
    /// Only for host-backend pools, while the buffer is not paused and no
    /// stream work writes it.
    pub unsafe fn host_slice(&self) -> &[u8] {
        std::slice::from_raw_parts(self.ptr as *const u8, self.size as usize)
    }

    /// The buffer's bytes, written from the CPU.
    ///
    /// # Safety
    /// As for [`Buffer::host_slice`], and no stream work reads it meanwhile.
    pub unsafe fn host_slice_mut(&mut self) -> &mut [u8] {
        std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.size as usize)
    }

    /// Frees the buffer now, reporting an error instead of ignoring it.
    pub fn free(self) -> Result<()> {
        let (pool, p, s) = (self.pool, self.ptr, self.stream);
        std::mem::forget(self);
        // SAFETY: the buffer owned p, and is gone.
        unsafe { pool.free(p, s) }
    }

    /// Gives up ownership: the pointer is returned and not freed on drop
    /// (free it with [`Pool::free`]).
    pub fn into_raw(self) -> *mut c_void {
        let p = self.ptr;
        std::mem::forget(self);
        p
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        // SAFETY: the buffer owns the pointer. A free of an owned pointer
        // cannot fail; nothing to report from a destructor anyway.
        unsafe { sys::vpmm_pool_free(self.pool.as_raw(), self.ptr, self.stream.as_raw()) };
        if std::thread::panicking() {
            callback::discard_pending_panic();
        } else {
            callback::resume_pending_panic();
        }
    }
}

impl fmt::Debug for Buffer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("ptr", &self.ptr)
            .field("size", &self.size)
            .field("stream", &self.stream)
            .finish()
    }
}

/// Attributes of an allocation (`vpmm_alloc_attrs`): a tag makes it
/// pausable, `host_backup` keeps its bytes across a pause, a reservation
/// pays for it.
///
/// ```
/// let attrs = vpmm::AllocAttrs::new().tag("weights").host_backup(true);
/// assert_eq!(attrs.tag_str(), Some("weights"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct AllocAttrs<'r> {
    tag: Option<String>,
    host_backup: bool,
    reservation: Option<&'r Reservation<'r>>,
}

impl<'r> AllocAttrs<'r> {
    /// No tag, no backup, no reservation.
    pub fn new() -> AllocAttrs<'r> {
        AllocAttrs::default()
    }

    /// The tag (at most 63 bytes; "" = untagged).
    pub fn tag(mut self, tag: &str) -> AllocAttrs<'r> {
        self.tag = Some(tag.to_string());
        self
    }

    /// Whether a pause copies the bytes to host memory and resume restores
    /// them (`VPMM_ALLOC_HOST_BACKUP`).
    pub fn host_backup(mut self, on: bool) -> AllocAttrs<'r> {
        self.host_backup = on;
        self
    }

    /// Charge the allocation to a reservation.
    pub fn reservation(mut self, reservation: &'r Reservation<'r>) -> AllocAttrs<'r> {
        self.reservation = Some(reservation);
        self
    }

    /// The tag, if any.
    pub fn tag_str(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    pub(crate) fn flags(&self) -> u32 {
        if self.host_backup {
            sys::VPMM_ALLOC_HOST_BACKUP
        } else {
            0
        }
    }

    pub(crate) fn reservation_raw(&self) -> *mut sys::vpmm_reservation {
        self.reservation.map_or(ptr::null_mut(), |r| r.as_raw())
    }
}
