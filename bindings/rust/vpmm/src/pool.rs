//! `Pool`: an owned libvpmm pool.
use std::ffi::{CStr, CString};
use std::fmt;
use std::mem::size_of;
use std::os::raw::c_void;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::Duration;

use vpmm_sys as sys;

use crate::buffer::{AllocAttrs, Buffer};
use crate::callback::{self, Callbacks, Pressure};
use crate::config::Config;
use crate::error::{check, check_or_undo, Error, Result, Status};
use crate::ledger::LedgerFallback;
use crate::reservation::{Overdraft, ReserveMode, Reservation};
use crate::stats::{RegionInfo, Stats, TagStats};
use crate::stream::{PoolStream, Stream};

/// A pool of GPU (or host) memory: `vpmm_pool`, destroyed on drop.
///
/// `Pool` is `Send + Sync`: every call may run concurrently from any thread
/// (the library serialises internally); destruction needs `&mut`/ownership,
/// which no other borrow can race. Allocations ([`Buffer`]), reservations and
/// pool-made streams borrow the pool, so they are released before it.
///
/// ```
/// use vpmm::{Backend, Config, Pool, Stream};
/// let pool = Pool::new(&Config::defaults().backend(Backend::Host)).unwrap();
/// let buf = pool.alloc(1 << 20).unwrap();
/// assert_eq!(pool.stats().n_live, 1);
/// drop(buf);
/// assert_eq!(pool.stats().n_live, 0);
/// ```
pub struct Pool {
    raw: NonNull<sys::vpmm_pool>,
    callbacks: *mut Callbacks,
}

// SAFETY: the C API is thread safe for every call but vpmm_pool_destroy,
// which only Drop makes (with exclusive access). Callbacks holds Send + Sync
// closures behind mutexes.
unsafe impl Send for Pool {}
unsafe impl Sync for Pool {}

fn c_tag(tag: Option<&str>) -> Result<Option<CString>> {
    match tag {
        None => Ok(None),
        Some(t) => CString::new(t)
            .map(Some)
            .map_err(|_| Error::new(Status::InvalidArgument, format!("tag {:?} contains a NUL byte", t))),
    }
}

fn opt_ptr(tag: &Option<CString>) -> *const std::os::raw::c_char {
    tag.as_ref().map_or(ptr::null(), |t| t.as_ptr())
}

impl Pool {
    /// Creates a pool (`vpmm_pool_create`).
    ///
    /// Errors: `InvalidArgument` (bad field, malformed environment variable),
    /// `Unsupported` (backend not built or no device), `OutOfMemory`
    /// (initial pages), `Backend`.
    pub fn new(config: &Config) -> Result<Pool> {
        let mut raw: *mut sys::vpmm_pool = ptr::null_mut();
        // SAFETY: valid config, writable out-parameter.
        check(unsafe { sys::vpmm_pool_create(config.as_raw(), &mut raw) })?;
        let raw = NonNull::new(raw).expect("vpmm_pool_create returned VPMM_OK and NULL");
        let callbacks = Box::into_raw(Box::new(Callbacks::default()));
        Ok(Pool { raw, callbacks })
    }

    /// A non-owning `Pool` for callbacks (wrapped in `ManuallyDrop`).
    ///
    /// # Safety
    /// `callbacks` must be the block of the pool that owns `raw`.
    pub(crate) unsafe fn borrowed(raw: NonNull<sys::vpmm_pool>, callbacks: *mut Callbacks) -> Pool {
        Pool { raw, callbacks }
    }

    /// The raw handle, for calls through `vpmm_sys`. It stays owned by this
    /// `Pool`: never pass it to `vpmm_pool_destroy`.
    pub fn as_raw(&self) -> *mut sys::vpmm_pool {
        self.raw.as_ptr()
    }

    /// The pool's kind, as [`Backend::name`](crate::Backend::name) spells it.
    pub fn backend_name(&self) -> &'static str {
        // SAFETY: a static string for a valid pool.
        let p = unsafe { sys::vpmm_pool_backend_name(self.as_raw()) };
        if p.is_null() {
            return "";
        }
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
    }

    /// The effective configuration, defaults resolved (`vpmm_pool_get_config`).
    pub fn config(&self) -> Result<Config> {
        // SAFETY: plain data; struct_size is set by from_raw below before use.
        let mut raw: sys::vpmm_config = unsafe { std::mem::zeroed() };
        raw.struct_size = size_of::<sys::vpmm_config>() as u32;
        check(unsafe { sys::vpmm_pool_get_config(self.as_raw(), &mut raw) })?;
        // The ledger's name points into the pool, which may go before the
        // Config: re-pointed at a copy the library keeps for the process.
        if !raw.ledger.is_null() {
            let option = CString::new("ledger").unwrap();
            // SAFETY: the pool's copy is valid while the pool lives (here).
            check(unsafe { sys::vpmm_option_parse(option.as_ptr(), raw.ledger, &mut raw) })?;
        }
        Ok(Config::from_raw(raw))
    }

    /// Allocates `size` bytes usable on `stream` in stream order
    /// (`vpmm_pool_malloc`) and returns the device pointer, which the caller
    /// frees with [`Pool::free`]. [`Pool::alloc`] returns an owning
    /// [`Buffer`] instead. Inside a [`Region`](crate::Region) scope the
    /// allocation takes the scope's tag.
    ///
    /// Errors: `InvalidArgument` (size 0 or overflowing), `OutOfMemory`
    /// (pool unchanged), `Backend`.
    ///
    /// ```
    /// # let pool = vpmm::Pool::new(&vpmm::Config::defaults().backend(vpmm::Backend::Host)).unwrap();
    /// let p = pool.malloc(1 << 20, vpmm::Stream::DEFAULT).unwrap();
    /// unsafe { pool.free(p, vpmm::Stream::DEFAULT).unwrap() };
    /// ```
    pub fn malloc(&self, size: u64, stream: Stream) -> Result<*mut c_void> {
        let mut out: *mut c_void = ptr::null_mut();
        // SAFETY: valid pool, writable out-parameter.
        let st = unsafe { sys::vpmm_pool_malloc(self.as_raw(), size, stream.as_raw(), &mut out) };
        check_or_undo(st, || unsafe {
            sys::vpmm_pool_free(self.as_raw(), out, stream.as_raw());
        })?;
        Ok(out)
    }

    /// [`Pool::malloc`] with attributes: a tag (pausable), host backup, a
    /// reservation to charge (`vpmm_pool_malloc_ex`).
    ///
    /// Errors: those of `malloc`, plus `InvalidArgument` for a tag longer
    /// than 63 bytes or containing NUL.
    pub fn malloc_with(&self, size: u64, stream: Stream, attrs: &AllocAttrs<'_>) -> Result<*mut c_void> {
        let tag = c_tag(attrs.tag_str())?;
        let raw = sys::vpmm_alloc_attrs {
            struct_size: size_of::<sys::vpmm_alloc_attrs>() as u32,
            flags: attrs.flags(),
            tag: opt_ptr(&tag),
            reservation: attrs.reservation_raw(),
            backup_dir: ptr::null(), // the pool's (disk backups are not offered here yet)
        };
        let mut out: *mut c_void = ptr::null_mut();
        // SAFETY: valid pool and attributes (the tag outlives the call).
        let st = unsafe { sys::vpmm_pool_malloc_ex(self.as_raw(), size, stream.as_raw(), &raw, &mut out) };
        check_or_undo(st, || unsafe {
            sys::vpmm_pool_free(self.as_raw(), out, stream.as_raw());
        })?;
        Ok(out)
    }

    /// Frees a pointer from [`Pool::malloc`] in the order of `stream`
    /// (`vpmm_pool_free`). NULL is a no-op.
    ///
    /// Errors: `UnknownPointer` (not from this pool, already freed, interior).
    ///
    /// # Safety
    /// `ptr` must not be owned by a [`Buffer`] (which frees it again on drop)
    /// and must not be used after this call.
    pub unsafe fn free(&self, ptr: *mut c_void, stream: Stream) -> Result<()> {
        check(sys::vpmm_pool_free(self.as_raw(), ptr, stream.as_raw()))
    }

    /// An owning allocation of `size` bytes on the default stream.
    pub fn alloc(&self, size: u64) -> Result<Buffer<'_>> {
        self.alloc_on(size, Stream::DEFAULT)
    }

    /// An owning allocation of `size` bytes on `stream`, freed on drop in
    /// that stream's order.
    pub fn alloc_on(&self, size: u64, stream: Stream) -> Result<Buffer<'_>> {
        let p = self.malloc(size, stream)?;
        Ok(Buffer::new(self, p, size, stream))
    }

    /// An owning allocation with attributes (see [`Pool::malloc_with`]).
    ///
    /// ```
    /// use vpmm::{AllocAttrs, Backend, Config, Pool, Stream};
    /// let pool = Pool::new(&Config::defaults().backend(Backend::Host)).unwrap();
    /// let kv = pool
    ///     .alloc_with(8 << 20, Stream::DEFAULT, &AllocAttrs::new().tag("kv").host_backup(true))
    ///     .unwrap();
    /// assert!(pool.pause(Some("kv")).unwrap());   // something was paused
    /// assert!(pool.resume(Some("kv")).unwrap());
    /// drop(kv);
    /// ```
    pub fn alloc_with(&self, size: u64, stream: Stream, attrs: &AllocAttrs<'_>) -> Result<Buffer<'_>> {
        let p = self.malloc_with(size, stream, attrs)?;
        Ok(Buffer::new(self, p, size, stream))
    }

    /// The allocation containing `ptr` (interior pointers allowed): its base
    /// and size (`vpmm_pool_lookup`). Errors: `UnknownPointer`.
    // `ptr` is a device address the library only compares, never dereferenced.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn lookup(&self, ptr: *const c_void) -> Result<(*mut c_void, u64)> {
        let (mut base, mut size): (*mut c_void, u64) = (ptr::null_mut(), 0);
        // SAFETY: valid pool, writable out-parameters.
        check(unsafe { sys::vpmm_pool_lookup(self.as_raw(), ptr, &mut base, &mut size) })?;
        Ok((base, size))
    }

    /// Blocks until all work queued on `stream` completes
    /// (`vpmm_pool_stream_synchronize`). Errors: `WrongState` (a held host
    /// stream), `Backend`.
    pub fn synchronize(&self, stream: Stream) -> Result<()> {
        check(unsafe { sys::vpmm_pool_stream_synchronize(self.as_raw(), stream.as_raw()) })
    }

    /// A new stream of the pool's backend, destroyed on drop.
    pub fn create_stream(&self) -> Result<PoolStream<'_>> {
        PoolStream::create(self)
    }

    /// Pauses every live allocation with `tag` (`None` = every tagged one):
    /// backs up `host_backup` allocations and releases their physical
    /// memory; their addresses stay reserved. Returns whether anything was
    /// paused (`vpmm_pool_pause_ex`).
    ///
    /// Errors: `InvalidArgument` (tag never used by this pool),
    /// `OutOfMemory` (no host memory for a backup: nothing paused), `Backend`.
    pub fn pause(&self, tag: Option<&str>) -> Result<bool> {
        Ok(self.pause_count(tag)? > 0)
    }

    /// [`Pool::pause`] returning how many regions were paused.
    pub fn pause_count(&self, tag: Option<&str>) -> Result<u64> {
        let tag = c_tag(tag)?;
        let mut n = 0u64;
        check(unsafe { sys::vpmm_pool_pause_ex(self.as_raw(), opt_ptr(&tag), &mut n) })?;
        Ok(n)
    }

    /// Resumes paused allocations with `tag` (`None` = all) at the same
    /// addresses, restoring backups. Returns whether anything was resumed
    /// (`vpmm_pool_resume_ex`).
    ///
    /// Errors: `InvalidArgument` (unknown tag), `OutOfMemory` (the rest stays
    /// paused: call again later), `Backend`.
    pub fn resume(&self, tag: Option<&str>) -> Result<bool> {
        Ok(self.resume_count(tag)? > 0)
    }

    /// [`Pool::resume`] returning how many regions were resumed.
    pub fn resume_count(&self, tag: Option<&str>) -> Result<u64> {
        let tag = c_tag(tag)?;
        let mut n = 0u64;
        check(unsafe { sys::vpmm_pool_resume_ex(self.as_raw(), opt_ptr(&tag), &mut n) })?;
        Ok(n)
    }

    /// Pins now the host buffers a pause of `tag` (`None` = every tag) would
    /// back up into, so that the first pause runs at copy speed instead of
    /// pinning (`vpmm_pool_prepare_backups`). Returns the pinned bytes cached
    /// after the call. The pool is not locked while it pins (seconds for tens
    /// of GiB), so it can run on a thread of its own (`Pool` is `Sync`) while
    /// others keep allocating; a pause started meanwhile waits for it.
    ///
    /// ```
    /// # let pool = vpmm::Pool::new(&vpmm::Config::defaults().backend(vpmm::Backend::Host)).unwrap();
    /// let attrs = vpmm::AllocAttrs::new().tag("kv").host_backup(true);
    /// let p = pool.malloc_with(4 << 20, vpmm::Stream::DEFAULT, &attrs).unwrap();
    /// let cached = pool.prepare_backups(Some("kv")).unwrap();
    /// assert!(cached >= 4 << 20);
    /// assert!(pool.pause(Some("kv")).unwrap()); // takes the buffers from the cache
    /// assert!(pool.resume(Some("kv")).unwrap());
    /// unsafe { pool.free(p, vpmm::Stream::DEFAULT).unwrap() };
    /// ```
    ///
    /// Errors: `InvalidArgument` (unknown tag), `OutOfMemory` (no host memory
    /// at all; what was pinned stays cached), `Unsupported`.
    pub fn prepare_backups(&self, tag: Option<&str>) -> Result<u64> {
        let tag = c_tag(tag)?;
        let mut n = 0u64;
        check(unsafe { sys::vpmm_pool_prepare_backups(self.as_raw(), opt_ptr(&tag), &mut n) })?;
        Ok(n)
    }

    /// Gives free cached physical memory back until at most `keep_bytes`
    /// stay mapped in free regions (`vpmm_pool_trim`).
    pub fn trim(&self, keep_bytes: u64) -> Result<()> {
        check(unsafe { sys::vpmm_pool_trim(self.as_raw(), keep_bytes) })
    }

    /// The program finished one step of its loop (`vpmm_pool_mark_step`):
    /// [`stats`](Self::stats) then reports the closed step's wall time and
    /// the driver time its mallocs and frees spent (`n_steps`,
    /// `last_step_ns`, `last_step_driver_ns`, `steps_ns`, `steps_driver_ns`).
    /// The first mark opens the first step. Changes no placement decision.
    pub fn mark_step(&self) -> Result<()> {
        check(unsafe { sys::vpmm_pool_mark_step(self.as_raw()) })
    }

    /// Changes the hard limit on mapped bytes (0 = none)
    /// (`vpmm_pool_set_limit`). Errors: `WrongState` (live memory above the
    /// new limit; the old limit stays).
    pub fn set_limit(&self, bytes: u64) -> Result<()> {
        check(unsafe { sys::vpmm_pool_set_limit(self.as_raw(), bytes) })
    }

    /// A snapshot of the pool's counters (`vpmm_pool_stats`).
    pub fn stats(&self) -> Stats {
        // SAFETY: plain data.
        let mut raw: sys::vpmm_stats = unsafe { std::mem::zeroed() };
        raw.struct_size = size_of::<sys::vpmm_stats>() as u32;
        // Cannot fail for a live pool and a correct struct_size.
        let st = unsafe { sys::vpmm_pool_stats(self.as_raw(), &mut raw) };
        debug_assert_eq!(st, sys::VPMM_OK);
        Stats::from(&raw)
    }

    /// Byte counts of the allocations with `tag` (`None` = all tagged ones
    /// together) (`vpmm_pool_tag_stats`). Errors: `InvalidArgument` (unknown tag).
    pub fn tag_stats(&self, tag: Option<&str>) -> Result<TagStats> {
        let tag = c_tag(tag)?;
        let mut raw: sys::vpmm_tag_stats = unsafe { std::mem::zeroed() };
        raw.struct_size = size_of::<sys::vpmm_tag_stats>() as u32;
        check(unsafe { sys::vpmm_pool_tag_stats(self.as_raw(), opt_ptr(&tag), &mut raw) })?;
        Ok(TagStats::from(&raw))
    }

    /// Every region of the pool's VA in ascending order (`vpmm_pool_dump`).
    pub fn regions(&self) -> Result<Vec<RegionInfo>> {
        let mut buf: Vec<sys::vpmm_region_info> = Vec::new();
        loop {
            let mut count = 0usize;
            let cap = buf.len();
            if cap > 0 {
                buf[0].struct_size = size_of::<sys::vpmm_region_info>() as u32;
            }
            let p = if cap > 0 { buf.as_mut_ptr() } else { ptr::null_mut() };
            check(unsafe { sys::vpmm_pool_dump(self.as_raw(), p, cap, &mut count) })?;
            if count <= cap {
                return Ok(buf[..count].iter().map(RegionInfo::from).collect());
            }
            // Regions may appear between calls: ask for some slack.
            buf = vec![unsafe { std::mem::zeroed() }; count + 16];
        }
    }

    /// The stats and every region in the seed notation
    /// (`vpmm_pool_dump_text`).
    pub fn dump_text(&self) -> Result<String> {
        let mut needed = 0usize;
        check(unsafe { sys::vpmm_pool_dump_text(self.as_raw(), ptr::null_mut(), 0, &mut needed) })?;
        loop {
            let mut buf = vec![0u8; needed + 256];
            let mut need2 = 0usize;
            check(unsafe {
                sys::vpmm_pool_dump_text(self.as_raw(), buf.as_mut_ptr() as *mut _, buf.len(), &mut need2)
            })?;
            if need2 <= buf.len() {
                let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                buf.truncate(end);
                return Ok(String::from_utf8_lossy(&buf).into_owned());
            }
            needed = need2;
        }
    }

    /// Verifies every invariant of the pool (`vpmm_pool_check`).
    /// Errors: `Internal` describing the first violation.
    pub fn check(&self) -> Result<()> {
        check(unsafe { sys::vpmm_pool_check(self.as_raw()) })
    }

    /// Reserves `bytes` of the pool's capacity, failing at once when they are
    /// not available. See [`Pool::reserve_with`].
    pub fn reserve(&self, bytes: u64) -> Result<Reservation<'_>> {
        self.reserve_with(bytes, ReserveMode::Try, Overdraft::Fail, None)
    }

    /// Reserves `bytes` of the pool's capacity (`vpmm_pool_reserve_ex`):
    /// `mode` says what happens when they are not available, `overdraft`
    /// what an allocation beyond the reservation does, `timeout` bounds a
    /// [`ReserveMode::Block`] wait (`None` = wait forever). Released on drop.
    ///
    /// Errors: `InvalidArgument` (0 bytes), `OutOfMemory` (not available, or
    /// more than the whole capacity), `Timeout` (nothing reserved).
    pub fn reserve_with(
        &self,
        bytes: u64,
        mode: ReserveMode,
        overdraft: Overdraft,
        timeout: Option<Duration>,
    ) -> Result<Reservation<'_>> {
        let ns = match timeout {
            None => u64::MAX,
            Some(d) => u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1),
        };
        let mut raw: *mut sys::vpmm_reservation = ptr::null_mut();
        let flags = mode.flags() | overdraft.flags();
        let st = unsafe { sys::vpmm_pool_reserve_ex(self.as_raw(), bytes, flags, ns, &mut raw) };
        check_or_undo(st, || unsafe {
            sys::vpmm_reservation_release(self.as_raw(), raw);
        })?;
        Ok(Reservation::new(self, raw))
    }

    /// Sets the out-of-memory callback: when an allocation (or resume) runs
    /// out of memory after the pool released what it could, `f(pool, bytes)`
    /// may free, pause or trim, and returns `true` to retry (at most 8 times
    /// per call). It runs on the allocating thread without the pool lock.
    /// A panic in `f` is caught at the FFI boundary (the allocation then
    /// fails) and resumed when the library call returns; a callback that
    /// panics during an allocation that succeeds anyway (a pressure
    /// callback) has the allocation freed before the panic resumes.
    ///
    /// ```
    /// use vpmm::{Backend, Config, Pool, Status};
    /// let pool = Pool::new(&Config::defaults().backend(Backend::Host).memory_limit(8 << 20)).unwrap();
    /// pool.set_oom_callback(|_pool, bytes| {
    ///     println!("out of memory for {} bytes", bytes);
    ///     false // no retry
    /// }).unwrap();
    /// assert_eq!(pool.malloc(64 << 20, vpmm::Stream::DEFAULT).unwrap_err().status(), Status::OutOfMemory);
    /// ```
    pub fn set_oom_callback<F>(&self, f: F) -> Result<()>
    where
        F: Fn(&Pool, u64) -> bool + Send + Sync + 'static,
    {
        *lock_slot(&self.callbacks().oom) = Some(Arc::new(f));
        check(unsafe {
            sys::vpmm_pool_set_oom_callback(self.as_raw(), Some(callback::oom_trampoline), self.callbacks as *mut c_void)
        })
    }

    /// Removes the out-of-memory callback.
    pub fn clear_oom_callback(&self) -> Result<()> {
        check(unsafe { sys::vpmm_pool_set_oom_callback(self.as_raw(), None, ptr::null_mut()) })?;
        *lock_slot(&self.callbacks().oom) = None;
        Ok(())
    }

    /// Sets the pressure callback: called, without the pool lock, when
    /// mapped bytes cross the trigger watermark upward or fall to the stop
    /// watermark. Panics are handled as for [`Pool::set_oom_callback`].
    pub fn set_pressure_callback<F>(&self, f: F) -> Result<()>
    where
        F: Fn(&Pool, Pressure) + Send + Sync + 'static,
    {
        *lock_slot(&self.callbacks().pressure) = Some(Arc::new(f));
        check(unsafe {
            sys::vpmm_pool_set_pressure_callback(
                self.as_raw(),
                Some(callback::pressure_trampoline),
                self.callbacks as *mut c_void,
            )
        })
    }

    /// The tags of this pool that other members' pressure may pause, in the
    /// order to pause them, replacing any earlier list (empty clears it;
    /// `vpmm_pool_ledger_evictable`). A member that cannot be admitted asks
    /// the others; this pool's watcher thread then calls its pressure
    /// callback, trims its cached free memory and pauses these tags one by
    /// one (with their backups) until the bytes asked for went back. Resume
    /// them with [`Pool::resume`] when the memory is back.
    ///
    /// Errors: `InvalidArgument` (more than 64 tags, a tag empty, longer than
    /// 63 bytes or with a comma or NUL), `WrongState` (the pool is in no ledger).
    pub fn set_ledger_evictable(&self, tags: &[&str]) -> Result<()> {
        let owned: Vec<CString> = tags
            .iter()
            .map(|t| c_tag(Some(t)).map(|c| c.unwrap()))
            .collect::<Result<Vec<CString>>>()?;
        let ptrs: Vec<*const std::os::raw::c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        // SAFETY: ptrs.len() NUL-terminated strings, alive for the call (the library copies them).
        check(unsafe { sys::vpmm_pool_ledger_evictable(self.as_raw(), ptrs.as_ptr(), ptrs.len()) })
    }

    /// What this pool's pauses do when the ledger's host budget refuses their
    /// backups (`vpmm_pool_ledger_set_fallback`): fail ([`LedgerFallback::None`],
    /// the default) or take their new backups on disk ([`LedgerFallback::Disk`]).
    ///
    /// Errors: `WrongState` (the pool is in no ledger).
    pub fn set_ledger_fallback(&self, fallback: LedgerFallback) -> Result<()> {
        // SAFETY: a valid pool.
        check(unsafe { sys::vpmm_pool_ledger_set_fallback(self.as_raw(), fallback.flags()) })
    }

    /// Removes the pressure callback.
    pub fn clear_pressure_callback(&self) -> Result<()> {
        check(unsafe { sys::vpmm_pool_set_pressure_callback(self.as_raw(), None, ptr::null_mut()) })?;
        *lock_slot(&self.callbacks().pressure) = None;
        Ok(())
    }

    fn callbacks(&self) -> &Callbacks {
        // SAFETY: allocated in new(), freed only in drop().
        unsafe { &*self.callbacks }
    }
}

fn lock_slot<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: exclusive access; nothing borrows the pool any more. The
        // callbacks block is freed after the pool, which may call them until
        // it is gone.
        unsafe {
            sys::vpmm_pool_destroy(self.as_raw());
            drop(Box::from_raw(self.callbacks));
        }
        callback::discard_pending_panic();
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("raw", &self.raw)
            .field("backend", &self.backend_name())
            .finish()
    }
}

/// The version of the loaded library, e.g. `"0.1.0"` (`vpmm_version`).
///
/// ```
/// assert!(vpmm::version().split('.').count() == 3);
/// ```
pub fn version() -> &'static str {
    unsafe { CStr::from_ptr(sys::vpmm_version()) }.to_str().unwrap_or("")
}

/// The ABI version of the loaded library (the SONAME suffix, 1 for
/// libvpmm.so.1) (`vpmm_abi_version`).
pub fn abi_version() -> i32 {
    unsafe { sys::vpmm_abi_version() }
}
