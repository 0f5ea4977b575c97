//! Safe Rust interface to libvpmm, a GPU virtual-memory pool allocator.
//!
//! A [`Pool`] hands out device memory from physical pages it maps into
//! reserved virtual address space, remapping pages to defragment instead of
//! asking the driver for more. Allocations are RAII [`Buffer`]s (freed on
//! drop, in the order of their stream); tagged allocations can be paused
//! (physical memory released, bytes optionally backed up on the host) and
//! resumed at the same addresses; [`Reservation`]s promise capacity; OOM and
//! pressure callbacks take closures. Every failure is an [`Error`] carrying a
//! [`Status`] and the library's message.
//!
//! The raw C API is the `vpmm-sys` crate; this crate depends on nothing else.
//!
//! ```
//! use vpmm::{AllocAttrs, Backend, Config, Pool, Stream};
//!
//! // The host backend needs no GPU; Backend::Auto picks CUDA where there is one.
//! let pool = Pool::new(&Config::defaults().backend(Backend::Host).page_size(64 << 10))?;
//! let weights = pool.alloc(4 << 20)?;
//! let scratch = pool.alloc_with(8 << 20, Stream::DEFAULT, &AllocAttrs::new().tag("scratch"))?;
//! assert!(pool.pause(Some("scratch"))?); // its 8 MiB of physical memory go back
//! assert_eq!(pool.stats().paused_bytes, 8 << 20);
//! assert!(pool.resume(Some("scratch"))?); // same address, new memory
//! drop(scratch);
//! drop(weights);
//! # Ok::<(), vpmm::Error>(())
//! ```
#![warn(missing_docs)]

mod buffer;
mod callback;
mod config;
mod error;
mod host;
mod ledger;
mod pool;
mod region;
mod reservation;
mod stats;
mod stream;

pub use buffer::{AllocAttrs, Buffer};
pub use callback::Pressure;
pub use config::{Backend, Config, HANDLE_SIZE_UNLIMITED, VIEWS_OFF};
pub use error::{Error, Result, Status};
pub use host::{Hold, HostStream};
pub use ledger::{DeviceId, Ledger, LedgerFallback, LedgerInfo, LedgerMember, Recorded};
pub use pool::{abi_version, version, Pool};
pub use region::Region;
pub use reservation::{Overdraft, ReserveMode, Reservation};
pub use stats::{RegionInfo, RegionKind, Stats, TagStats};
pub use stream::{PoolStream, Stream};

/// Re-export of the raw bindings, for what this crate does not wrap.
pub use vpmm_sys as sys;
