//! `Region`: the thread-local allocation scope (`vpmm_region_push`/`pop`).
use std::ffi::CString;
use std::marker::PhantomData;

use vpmm_sys as sys;

use crate::error::{check, Error, Result, Status};

/// A thread-local allocation scope: until it is dropped, allocations made
/// on this thread without attributes ([`Pool::malloc`](crate::Pool::malloc),
/// [`Pool::alloc`](crate::Pool::alloc)) take its tag and backup flag, so they
/// can be paused. Scopes nest; dropping one restores the enclosing scope.
///
/// `Region` is neither `Send` nor `Sync`: the scope belongs to the thread
/// that opened it, and must be closed there. Drop scopes in reverse order of
/// creation (the natural order of nested blocks): a drop always closes the
/// innermost open scope of the thread.
///
/// ```
/// use vpmm::{Backend, Config, Pool, Region};
/// let pool = Pool::new(&Config::defaults().backend(Backend::Host)).unwrap();
/// let buf = {
///     let _scope = Region::push("activations", false).unwrap();
///     pool.alloc(1 << 20).unwrap()
/// };
/// assert_eq!(pool.tag_stats(Some("activations")).unwrap().n_live, 1);
/// # drop(buf);
/// ```
///
/// A scope cannot move to another thread:
///
/// ```compile_fail
/// fn needs_send<T: Send>() {}
/// needs_send::<vpmm::Region>();
/// ```
#[derive(Debug)]
pub struct Region {
    _not_send: PhantomData<*const ()>,
}

impl Region {
    /// Opens a scope with `tag`; `host_backup` sets `VPMM_ALLOC_HOST_BACKUP`
    /// on its allocations.
    ///
    /// Errors: `InvalidArgument` (tag longer than 63 bytes or with a NUL).
    pub fn push(tag: &str, host_backup: bool) -> Result<Region> {
        let ctag = CString::new(tag)
            .map_err(|_| Error::new(Status::InvalidArgument, format!("tag {:?} contains a NUL byte", tag)))?;
        let flags = if host_backup { sys::VPMM_ALLOC_HOST_BACKUP } else { 0 };
        // SAFETY: a valid string for the duration of the call (it is copied).
        check(unsafe { sys::vpmm_region_push(ctag.as_ptr(), flags) })?;
        Ok(Region { _not_send: PhantomData })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // The scope this guard opened is open on this thread (the guard
        // cannot leave it), so the pop succeeds.
        unsafe { sys::vpmm_region_pop() };
    }
}
