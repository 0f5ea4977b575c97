//! `Config`: a builder over every field of `vpmm_config`.
use std::ffi::{CStr, CString};
use std::fmt;
use std::mem::size_of;

use vpmm_sys as sys;

use crate::error::{check, Error, Result, Status};

/// `max_handle_size` value for one physical handle per growth
/// (`VPMM_HANDLE_SIZE_UNLIMITED`).
pub const HANDLE_SIZE_UNLIMITED: u64 = sys::VPMM_HANDLE_SIZE_UNLIMITED;

/// `view_min_size` value for no views at all (`VPMM_VIEWS_OFF`).
pub const VIEWS_OFF: u64 = sys::VPMM_VIEWS_OFF;

/// Which backend a pool uses (`VPMM_BACKEND_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// CUDA when a GPU is usable, else host.
    Auto,
    /// The CUDA driver's virtual memory management.
    Cuda,
    /// HIP (AMD GPUs).
    Hip,
    /// Host memory (memfd + mmap): no GPU needed, for tests.
    Host,
}

impl Backend {
    /// The C constant (`VPMM_BACKEND_*`).
    pub fn code(self) -> i32 {
        match self {
            Backend::Auto => sys::VPMM_BACKEND_AUTO,
            Backend::Cuda => sys::VPMM_BACKEND_CUDA,
            Backend::Hip => sys::VPMM_BACKEND_HIP,
            Backend::Host => sys::VPMM_BACKEND_HOST,
        }
    }

    /// The kind's name as the library's one table of them spells it
    /// (`vpmm_backend_kind_name`: `"auto"`, `"cuda"`, `"hip"`, `"host"`, as
    /// `VPMM_BACKEND` and [`Pool::backend_name`](crate::Pool::backend_name) do).
    pub fn name(self) -> &'static str {
        // SAFETY: a static string (or NULL) for any value.
        let p = unsafe { sys::vpmm_backend_kind_name(self.code()) };
        if p.is_null() {
            return "";
        }
        unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap_or("")
    }

    /// The backend of a C constant; `None` for an unknown value.
    pub fn from_code(code: i32) -> Option<Backend> {
        match code {
            sys::VPMM_BACKEND_AUTO => Some(Backend::Auto),
            sys::VPMM_BACKEND_CUDA => Some(Backend::Cuda),
            sys::VPMM_BACKEND_HIP => Some(Backend::Hip),
            sys::VPMM_BACKEND_HOST => Some(Backend::Host),
            _ => None,
        }
    }
}

/// The configuration of a pool: a builder over every field of the C
/// `vpmm_config`. Each setter documents its field; 0 means "the default"
/// wherever the C header says so.
///
/// Start from [`Config::from_env`] (the library's defaults with the `VPMM_*`
/// environment variables applied, like `vpmm_config_init`; also what
/// `Config::default()` gives) or [`Config::defaults`] (the defaults only,
/// `vpmm_config_init_defaults`). A malformed environment variable is not
/// ignored: [`Pool::new`](crate::Pool::new) then fails with
/// `Status::InvalidArgument` naming it.
///
/// ```
/// use vpmm::{Backend, Config, Pool};
/// let config = Config::defaults()
///     .backend(Backend::Host)
///     .page_size(64 << 10)
///     .initial_pages(4)
///     .memory_limit(16 << 20);
/// let pool = Pool::new(&config).unwrap();
/// assert_eq!(pool.stats().mapped_bytes, 4 * (64 << 10));
/// ```
#[derive(Clone, Copy)]
pub struct Config {
    raw: sys::vpmm_config,
}

// One setter per field of `vpmm_config` (`backend` aside, which takes an
// enum), plus the list of their names and the Debug lines of their values:
// the tests hold that list against the library's own list of the fields
// (`vpmm_struct_field`), which comes from its single option list, so a field
// added to the library without its setter here fails them.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, value: $ty) -> Config {
                self.raw.$name = value;
                self
            }
        )*

        /// The fields that have a setter of their own, in declaration order.
        #[allow(dead_code)] // read by the tests
        const SETTER_FIELDS: &'static [&'static str] = &[$(stringify!($name)),*];

        fn debug_setter_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
            $(d.field(stringify!($name), &self.raw.$name);)*
        }
    };
}

impl Config {
    fn zeroed() -> sys::vpmm_config {
        // SAFETY: vpmm_config is plain data; all-zero is a valid value.
        let mut raw: sys::vpmm_config = unsafe { std::mem::zeroed() };
        raw.struct_size = size_of::<sys::vpmm_config>() as u32;
        raw
    }

    /// The library's defaults with the `VPMM_*` environment variables
    /// applied (`vpmm_config_init`).
    pub fn from_env() -> Config {
        let mut raw = Config::zeroed();
        // SAFETY: raw is a valid, writable vpmm_config of the size passed: the
        // library writes no more than that, whatever its own size.
        unsafe { sys::vpmm_config_init_sized(&mut raw, size_of::<sys::vpmm_config>() as u32, 0) };
        Config { raw }
    }

    /// The library's defaults, ignoring the environment
    /// (`vpmm_config_init_defaults`): for programs and tests that must not
    /// be steered by `VPMM_*` variables.
    pub fn defaults() -> Config {
        let mut raw = Config::zeroed();
        // SAFETY: as above.
        unsafe {
            sys::vpmm_config_init_sized(
                &mut raw,
                size_of::<sys::vpmm_config>() as u32,
                sys::VPMM_CONFIG_DEFAULTS_ONLY,
            )
        };
        Config { raw }
    }

    /// A configuration from a raw C struct (its `struct_size` is set here).
    /// Its `ledger`, if not null, must stay valid as long as the `Config`
    /// (a string the library keeps, as [`Config::ledger`] sets).
    pub fn from_raw(mut raw: sys::vpmm_config) -> Config {
        raw.struct_size = size_of::<sys::vpmm_config>() as u32;
        Config { raw }
    }

    /// The C struct, to read any field or to hand to `vpmm_sys`.
    pub fn as_raw(&self) -> &sys::vpmm_config {
        &self.raw
    }

    /// The backend (`backend`; env `VPMM_BACKEND`).
    pub fn backend(mut self, backend: Backend) -> Config {
        self.raw.backend = backend.code();
        self
    }

    /// The backend this configuration names; `None` for an unknown value.
    pub fn get_backend(&self) -> Option<Backend> {
        Backend::from_code(self.raw.backend)
    }

    /// The ledger the pool joins (`ledger`; env `VPMM_LEDGER`; docs/ledger.md):
    /// one memory budget shared with the pools of other processes on its
    /// device; see [`Ledger`](crate::Ledger). The name is 1-64 characters of
    /// `[A-Za-z0-9_.-]`, not starting with `.`; `""` = none (the default).
    /// The library keeps a copy of the name for the life of the process
    /// (`vpmm_option_parse`), so `Config` stays `Copy` and never points at
    /// memory it does not own.
    ///
    /// Errors: `InvalidArgument` (not a ledger name).
    pub fn ledger(mut self, name: &str) -> Result<Config> {
        let text = CString::new(name).map_err(|_| {
            Error::new(Status::InvalidArgument, format!("ledger name {:?} contains a NUL byte", name))
        })?;
        let option = CString::new("ledger").unwrap();
        // SAFETY: NUL-terminated strings and a valid config of its struct_size.
        check(unsafe { sys::vpmm_option_parse(option.as_ptr(), text.as_ptr(), &mut self.raw) })?;
        Ok(self)
    }

    /// The ledger this configuration names; `None` when none.
    pub fn get_ledger(&self) -> Option<String> {
        if self.raw.ledger.is_null() {
            return None;
        }
        // SAFETY: set by `ledger`, `from_env` or `Pool::config`, each a copy
        // the library keeps for the life of the process.
        let s = unsafe { CStr::from_ptr(self.raw.ledger) }.to_string_lossy().into_owned();
        if s.is_empty() {
            None
        } else {
            Some(s)
        }
    }

    setters! {
        /// Device ordinal (`device`; ignored by the host backend; env `VPMM_DEVICE`).
        device: i32;
        /// Accounting unit in bytes, a multiple of the backend granularity;
        /// 0 = the backend's (2 MiB on CUDA and host). Env `VPMM_PAGE_SIZE`.
        page_size: u64;
        /// Bytes of VA reserved per chunk; 0 = the backend's default.
        /// Env `VPMM_VA_SIZE`.
        va_size: u64;
        /// Pages mapped eagerly at creation. Env `VPMM_PAGES`.
        initial_pages: u64;
        /// Host backend: physical bytes it may hand out (0 = 1 GiB).
        /// Env `VPMM_HOST_CAPACITY`.
        host_capacity: u64;
        /// How a growth is cut into physical handles: 0 = scaled handles,
        /// `page_size` = one handle per page, [`HANDLE_SIZE_UNLIMITED`] = one
        /// per growth, another multiple of `page_size` = handles of at most
        /// that. Env `VPMM_MAX_HANDLE_SIZE`.
        max_handle_size: u64;
        /// Requests up to this size share pages in size classes (0 =
        /// page_size / 2; below 256 turns it off). Env `VPMM_SMALL_SIZE`.
        small_size: u64;
        /// Pinned host bytes kept cached for pause backups after a resume
        /// (0 = keep all). Env `VPMM_BACKUP_CACHE_SIZE`.
        backup_cache_size: u64;
        /// Hard cap on mapped bytes (0 = none). Env `VPMM_MEMORY_LIMIT`.
        memory_limit: u64;
        /// Cap as a fraction of the device's memory (0 = none); the smaller
        /// of the two caps wins.
        memory_limit_fraction: f64;
        /// Pressure starts when mapped >= trigger x capacity (0 = 0.85).
        watermark_trigger: f64;
        /// Pressure ends when mapped <= stop x capacity (0 = 0.65).
        watermark_stop: f64;
        /// Most pinned host bytes held for pause backups (0 = no limit);
        /// beyond it backups go to pageable memory. Env `VPMM_BACKUP_PINNED_LIMIT`.
        backup_pinned_limit: u64;
        /// HIP backend: largest physical handle one `hipMemCreate` makes (0 =
        /// by the ROCm version: 256 MiB below 7.0). Env `VPMM_HIP_CHUNK_SIZE`.
        hip_chunk_size: u64;
        /// CUDA: other devices given access to the pool's memory, bit d =
        /// device d (0 = this device only). Env `VPMM_PEER_DEVICES` ("1,3").
        peer_devices: u64;
        /// What untagged requests above `small_size` round up to (0 =
        /// `page_size`: whole pages; 512 lets neighbours share pages).
        /// Env `VPMM_LARGE_ROUNDING`.
        large_rounding: u64;
        /// How far past the bytes asked for a malloc may grow instead of
        /// remapping pages (0 = 0.015; negative = page-exact, always remap).
        /// Env `VPMM_REMAP_SLACK` ("0.02", "2%", "exact").
        remap_slack: f64;
        /// 1 = every physical handle can be shared with other processes
        /// (`vpmm_pool_export`; docs/ipc.md); 0 (default) = not exportable.
        /// Env `VPMM_EXPORTABLE`.
        exportable: u64;
        /// Smallest untagged request a view may serve: free handles mapped
        /// where they lie at a VA of its own instead of moved (0 = 64 MiB in
        /// the views chain, none in the others; `VIEWS_OFF` = no views).
        /// Env `VPMM_VIEW_MIN_SIZE`.
        view_min_size: u64;
        /// Share of elapsed time the pool may spend moving pages; past it a
        /// malloc grows instead (0 = 0.01; `sys::VPMM_DRIVER_BUDGET_NEVER`,
        /// `sys::VPMM_DRIVER_BUDGET_EXACT`). Env `VPMM_DRIVER_BUDGET`.
        driver_budget: f64;
        /// The placement chain (`sys::VPMM_PLACEMENT_*`: default, exact,
        /// views, pending). Env `VPMM_PLACEMENT`.
        placement: i32;
        /// 0 = the driver budget counts wall time; N = each malloc and free
        /// stands for N us of work (deterministic replays). Env
        /// `VPMM_BUDGET_CLOCK_US`.
        budget_clock_us: i32;
    }
}

impl Default for Config {
    /// [`Config::from_env`]: the environment's defaults.
    fn default() -> Config {
        Config::from_env()
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("backend", &self.raw.backend);
        d.field("config_error", &self.raw.config_error);
        self.debug_setter_fields(&mut d);
        d.field("ledger", &self.get_ledger());
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{CStr, CString};

    /// The fields of `vpmm_config` as the loaded library lists them.
    fn library_fields() -> Vec<String> {
        let name = CString::new("vpmm_config").unwrap();
        let mut n = 0u32;
        // SAFETY: a NUL-terminated name and valid out-pointers.
        let st = unsafe { sys::vpmm_struct_layout(name.as_ptr(), std::ptr::null_mut(), &mut n) };
        assert_eq!(st, sys::VPMM_OK);
        (0..n)
            .map(|i| {
                // SAFETY: vpmm_field_info is plain data; struct_size is set below.
                let mut f: sys::vpmm_field_info = unsafe { std::mem::zeroed() };
                f.struct_size = size_of::<sys::vpmm_field_info>() as u32;
                // SAFETY: as above; the name the library returns is static.
                assert_eq!(unsafe { sys::vpmm_struct_field(name.as_ptr(), i, &mut f) }, sys::VPMM_OK);
                unsafe { CStr::from_ptr(f.name) }.to_str().unwrap().to_string()
            })
            .collect()
    }

    #[test]
    fn every_field_of_the_library_has_a_setter_and_a_debug_line() {
        let mut want: Vec<String> = library_fields()
            .into_iter()
            .filter(|f| f != "struct_size" && f != "config_error")
            .collect();
        let mut have: Vec<String> = ["backend", "ledger"]
            .iter()
            .copied()
            .chain(Config::SETTER_FIELDS.iter().copied())
            .map(String::from)
            .collect();
        want.sort();
        have.sort();
        assert_eq!(have, want, "Config's setters against the library's vpmm_config fields");
        let shown = format!("{:?}", Config::defaults());
        for field in want.iter().chain(["config_error".to_string()].iter()) {
            assert!(shown.contains(&format!("{}: ", field)), "Debug lacks {}: {}", field, shown);
        }
    }
}
