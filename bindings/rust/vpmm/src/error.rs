//! `Error` and `Status`: a failed libvpmm call as a Rust error value.
use std::ffi::CStr;
use std::fmt;

use vpmm_sys as sys;

/// Why a libvpmm call failed: the C status codes `VPMM_ERR_*` as an enum.
///
/// The codes are pinned forever by the C ABI; `Other` carries a code this
/// version of the crate does not know (a newer library).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// `VPMM_ERR_INVALID_ARGUMENT`: null pointer, zero or overflowing size,
    /// bad enum, bad configuration, unknown tag.
    InvalidArgument,
    /// `VPMM_ERR_OUT_OF_MEMORY`: the backend refused physical memory, VA or
    /// host capacity, or a limit or reservation does not leave room.
    OutOfMemory,
    /// `VPMM_ERR_UNKNOWN_POINTER`: free or lookup of a pointer the pool did
    /// not hand out.
    UnknownPointer,
    /// `VPMM_ERR_WRONG_STATE`: the operation is not valid in the object's
    /// current state.
    WrongState,
    /// `VPMM_ERR_UNSUPPORTED`: backend not built or not available, or it
    /// lacks a capability.
    Unsupported,
    /// `VPMM_ERR_BACKEND`: the driver (or host OS) failed for a reason other
    /// than running out of memory.
    Backend,
    /// `VPMM_ERR_INTERNAL`: an invariant of the pool does not hold (a bug).
    Internal,
    /// `VPMM_ERR_TIMEOUT`: a wait with a timeout ran out; nothing changed.
    Timeout,
    /// A status code this crate does not know.
    Other(i32),
}

impl Status {
    /// The status of a C status code; `None` for `VPMM_OK`.
    ///
    /// ```
    /// use vpmm::Status;
    /// assert_eq!(Status::from_code(vpmm_sys::VPMM_ERR_TIMEOUT), Some(Status::Timeout));
    /// assert_eq!(Status::from_code(vpmm_sys::VPMM_OK), None);
    /// ```
    pub fn from_code(code: sys::vpmm_status) -> Option<Status> {
        Some(match code {
            sys::VPMM_OK => return None,
            sys::VPMM_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::VPMM_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::VPMM_ERR_UNKNOWN_POINTER => Status::UnknownPointer,
            sys::VPMM_ERR_WRONG_STATE => Status::WrongState,
            sys::VPMM_ERR_UNSUPPORTED => Status::Unsupported,
            sys::VPMM_ERR_BACKEND => Status::Backend,
            sys::VPMM_ERR_INTERNAL => Status::Internal,
            sys::VPMM_ERR_TIMEOUT => Status::Timeout,
            other => Status::Other(other),
        })
    }

    /// The C status code (`VPMM_ERR_*`).
    ///
    /// ```
    /// assert_eq!(vpmm::Status::OutOfMemory.code(), vpmm_sys::VPMM_ERR_OUT_OF_MEMORY);
    /// ```
    pub fn code(self) -> sys::vpmm_status {
        match self {
            Status::InvalidArgument => sys::VPMM_ERR_INVALID_ARGUMENT,
            Status::OutOfMemory => sys::VPMM_ERR_OUT_OF_MEMORY,
            Status::UnknownPointer => sys::VPMM_ERR_UNKNOWN_POINTER,
            Status::WrongState => sys::VPMM_ERR_WRONG_STATE,
            Status::Unsupported => sys::VPMM_ERR_UNSUPPORTED,
            Status::Backend => sys::VPMM_ERR_BACKEND,
            Status::Internal => sys::VPMM_ERR_INTERNAL,
            Status::Timeout => sys::VPMM_ERR_TIMEOUT,
            Status::Other(code) => code,
        }
    }

    /// The library's name of the status, e.g. `"VPMM_ERR_OUT_OF_MEMORY"`.
    ///
    /// ```
    /// assert_eq!(vpmm::Status::Timeout.name(), "VPMM_ERR_TIMEOUT");
    /// ```
    pub fn name(self) -> &'static str {
        // SAFETY: vpmm_status_string returns a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(sys::vpmm_status_string(self.code())) };
        s.to_str().unwrap_or("VPMM_ERR_UNKNOWN")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed libvpmm call: its [`Status`] and the library's message
/// (`vpmm_last_error`), which names the call and the offending value.
///
/// ```
/// # let pool = vpmm::Pool::new(&vpmm::Config::defaults().backend(vpmm::Backend::Host)).unwrap();
/// let err = pool.malloc(0, vpmm::Stream::DEFAULT).unwrap_err();
/// assert_eq!(err.status(), vpmm::Status::InvalidArgument);
/// assert!(err.message().contains("vpmm_pool_malloc"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    /// An error with the given status and message.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// The error of a failed call, with the calling thread's message. Must
    /// run right after the call, before any other libvpmm call on this thread.
    pub(crate) fn last(code: sys::vpmm_status) -> Error {
        // SAFETY: never NULL; valid until the next vpmm call on this thread,
        // and copied at once.
        let msg = unsafe { CStr::from_ptr(sys::vpmm_last_error()) };
        Error {
            status: Status::from_code(code).unwrap_or(Status::Other(code)),
            message: msg.to_string_lossy().into_owned(),
        }
    }

    /// Why the call failed.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The library's sentence about the failure (may be empty).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.status)
        } else {
            write!(f, "{} ({})", self.message, self.status)
        }
    }
}

impl std::error::Error for Error {}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a status into a `Result`, reading the message on failure, and
/// resumes a panic that a callback raised during the call.
pub(crate) fn check(code: sys::vpmm_status) -> Result<()> {
    let result = check_quiet(code);
    crate::callback::resume_pending_panic();
    result
}

/// `check` without resuming a callback's panic, for calls that must undo
/// what they made before the panic goes on (see `check_or_undo`).
pub(crate) fn check_quiet(code: sys::vpmm_status) -> Result<()> {
    if code == sys::VPMM_OK {
        Ok(())
    } else {
        Err(Error::last(code))
    }
}

/// For calls that create something (an allocation, a reservation): when a
/// callback panicked during a call that nevertheless succeeded, `undo`
/// releases what it created before the panic resumes, so nothing leaks.
pub(crate) fn check_or_undo(code: sys::vpmm_status, undo: impl FnOnce()) -> Result<()> {
    let result = check_quiet(code);
    if let Some(payload) = crate::callback::take_pending_panic() {
        if result.is_ok() {
            undo();
            // A panic of a callback the undo ran is dropped: the first goes on.
            crate::callback::discard_pending_panic();
        }
        std::panic::resume_unwind(payload);
    }
    result
}
