//! `Reservation`: bytes of a pool's capacity promised to one owner.
use std::fmt;

use vpmm_sys as sys;

use crate::error::{check, Result};
use crate::pool::Pool;

/// What [`Pool::reserve_with`] does when the bytes are not available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReserveMode {
    /// Fail at once with `OutOfMemory` (`VPMM_RESERVE_TRY`).
    Try,
    /// Wait until releases make them available (`VPMM_RESERVE_BLOCK`).
    Block,
    /// Reserve what is available, up to the request (`VPMM_RESERVE_UPTO`).
    UpTo,
}

impl ReserveMode {
    pub(crate) fn flags(self) -> u32 {
        match self {
            ReserveMode::Try => sys::VPMM_RESERVE_TRY,
            ReserveMode::Block => sys::VPMM_RESERVE_BLOCK,
            ReserveMode::UpTo => sys::VPMM_RESERVE_UPTO,
        }
    }
}

/// What an allocation beyond its reservation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Overdraft {
    /// It fails with `OutOfMemory` (the default).
    Fail,
    /// It is allowed and counts as unreserved (`VPMM_RESERVE_OVERDRAFT_IGNORE`).
    Ignore,
    /// The reservation grows by 1.25x the shortfall if it can
    /// (`VPMM_RESERVE_OVERDRAFT_GROW`).
    Grow,
}

impl Overdraft {
    pub(crate) fn flags(self) -> u32 {
        match self {
            Overdraft::Fail => 0,
            Overdraft::Ignore => sys::VPMM_RESERVE_OVERDRAFT_IGNORE,
            Overdraft::Grow => sys::VPMM_RESERVE_OVERDRAFT_GROW,
        }
    }
}

/// Bytes of a pool's capacity promised to their owner: unreserved
/// allocations and other reservations cannot take them. Allocations are
/// charged to it through [`AllocAttrs::reservation`](crate::AllocAttrs::reservation).
/// Released on drop (`vpmm_reservation_release`); allocations still charged
/// to it stay valid and count as unreserved.
///
/// ```
/// use vpmm::{AllocAttrs, Backend, Config, Pool, Stream};
/// let pool = Pool::new(&Config::defaults().backend(Backend::Host).memory_limit(64 << 20)).unwrap();
/// let r = pool.reserve(16 << 20).unwrap();
/// let buf = pool.alloc_with(4 << 20, Stream::DEFAULT, &AllocAttrs::new().reservation(&r)).unwrap();
/// assert_eq!(r.used().unwrap(), 4 << 20);
/// drop(buf);
/// drop(r);
/// assert_eq!(pool.stats().reserved_bytes, 0);
/// ```
pub struct Reservation<'p> {
    pool: &'p Pool,
    raw: *mut sys::vpmm_reservation,
}

// SAFETY: the reservation is a token of a thread-safe pool.
unsafe impl Send for Reservation<'_> {}
unsafe impl Sync for Reservation<'_> {}

impl<'p> Reservation<'p> {
    pub(crate) fn new(pool: &'p Pool, raw: *mut sys::vpmm_reservation) -> Reservation<'p> {
        Reservation { pool, raw }
    }

    /// The raw handle (still owned by this value).
    pub fn as_raw(&self) -> *mut sys::vpmm_reservation {
        self.raw
    }

    /// Its size and the bytes currently charged to it
    /// (`vpmm_reservation_info`).
    pub fn info(&self) -> Result<(u64, u64)> {
        let (mut size, mut used) = (0u64, 0u64);
        check(unsafe { sys::vpmm_reservation_info(self.pool.as_raw(), self.raw, &mut size, &mut used) })?;
        Ok((size, used))
    }

    /// Its size in bytes (it may grow with [`Overdraft::Grow`]).
    pub fn size(&self) -> Result<u64> {
        Ok(self.info()?.0)
    }

    /// The bytes of live allocations charged to it.
    pub fn used(&self) -> Result<u64> {
        Ok(self.info()?.1)
    }

    /// Releases it now, reporting an error instead of ignoring it.
    pub fn release(self) -> Result<()> {
        let (pool, raw) = (self.pool, self.raw);
        std::mem::forget(self);
        check(unsafe { sys::vpmm_reservation_release(pool.as_raw(), raw) })
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        // SAFETY: owned, released once.
        unsafe { sys::vpmm_reservation_release(self.pool.as_raw(), self.raw) };
    }
}

impl fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation").field("raw", &self.raw).field("info", &self.info().ok()).finish()
    }
}
