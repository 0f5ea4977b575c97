//! `Ledger`: one memory budget for the pools of several processes on a
//! device (docs/ledger.md, `vpmm_ledger.h`).
//!
//! A pool joins a ledger through its configuration ([`Config::ledger`],
//! or `VPMM_LEDGER` with [`Config::from_env`]); the ledger then admits every
//! byte of physical memory it creates, so that the members of every process
//! never hold more than the device's budget together. [`Ledger`] names a
//! ledger and reads or changes it from any process of its user, member or
//! not; [`Pool::set_ledger_evictable`] and [`Pool::set_ledger_fallback`]
//! are a member's own choices.
//!
//! ```
//! use vpmm::{Backend, Config, Ledger, Pool};
//! let name = format!("doc-ledger-{}", std::process::id());
//! let config = Config::defaults().backend(Backend::Host).page_size(64 << 10).ledger(&name)?;
//! let pool = Pool::new(&config)?;
//! let ledger = Ledger::new(&name)?;
//! ledger.set_budget(0, 8 << 20)?;
//! let _buf = pool.alloc(2 << 20)?;
//! let info = ledger.read(0)?;
//! assert_eq!((info.budget_bytes, info.admitted_bytes), (8 << 20, 2 << 20));
//! assert_eq!(info.members[0].pid, std::process::id() as i32);
//! drop(_buf);
//! drop(pool);
//! ledger.remove()?;
//! # Ok::<(), vpmm::Error>(())
//! ```
//!
//! [`Config::ledger`]: crate::Config::ledger
//! [`Config::from_env`]: crate::Config::from_env
//! [`Pool::set_ledger_evictable`]: crate::Pool::set_ledger_evictable
//! [`Pool::set_ledger_fallback`]: crate::Pool::set_ledger_fallback
use std::ffi::CString;
use std::fmt;
use std::mem::size_of;
use std::time::Duration;

use vpmm_sys as sys;

use crate::error::{check, Error, Result, Status};

/// A ledger by name. It holds no resource: every call opens the segment
/// (`/dev/shm/vpmm.ledger.NAME`), checks it (the user's own, mode 0600, a
/// sound header) and closes it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    name: CString,
}

/// A device's 16-byte identity, the ledger's key of the device: the same in
/// every process whatever the device's ordinal there (CUDA: the device's
/// UUID, `nvidia-smi -L`'s `GPU-...`; host backend: the boot id with the
/// ordinal mixed in). Shown (`{}`) as a UUID's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DeviceId(pub [u8; 16]);

impl DeviceId {
    /// From the two numbers of the C structs: bytes 0-7 big-endian in `hi`, 8-15 in `lo`.
    pub fn from_words(hi: u64, lo: u64) -> DeviceId {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&hi.to_be_bytes());
        b[8..].copy_from_slice(&lo.to_be_bytes());
        DeviceId(b)
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{:02x}", byte)?;
        }
        Ok(())
    }
}

/// A figure the ledger shows but never relies on (a member's ordinal, a
/// device's identity): what the segment says, once its check held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recorded<T> {
    /// The value, its check held.
    Known(T),
    /// Not written: by a member of a libvpmm from before the field (or, for
    /// an identity, one being written right now).
    NotRecorded,
    /// It fails its check (garbage in the segment): not to be believed.
    Unreadable,
}

impl<T> Default for Recorded<T> {
    fn default() -> Self {
        Recorded::NotRecorded
    }
}

impl<T> Recorded<T> {
    /// The value, if it was recorded and reads sound.
    pub fn known(self) -> Option<T> {
        match self {
            Recorded::Known(v) => Some(v),
            _ => None,
        }
    }
}

// device_id_state and the two words of a C struct; None: no device has the index.
fn device_id(state: u32, hi: u64, lo: u64) -> Option<Recorded<DeviceId>> {
    match state {
        sys::VPMM_LEDGER_ID_OK => Some(Recorded::Known(DeviceId::from_words(hi, lo))),
        sys::VPMM_LEDGER_ID_NOT_RECORDED => Some(Recorded::NotRecorded),
        sys::VPMM_LEDGER_ID_NO_DEVICE => None,
        _ => Some(Recorded::Unreadable),
    }
}

fn ordinal(o: i32) -> Recorded<u32> {
    match o {
        sys::VPMM_LEDGER_ORDINAL_NOT_RECORDED => Recorded::NotRecorded,
        o if o >= 0 => Recorded::Known(o as u32),
        _ => Recorded::Unreadable,
    }
}

/// One member (a pool) as [`Ledger::read`] sees it (`vpmm_ledger_member`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LedgerMember {
    /// Its slot in the segment, 0-63.
    pub slot: u32,
    /// The process it lives in.
    pub pid: i32,
    /// The ledger's index of its device (16: unreadable): devices are keyed
    /// by identity, not ordinal, and numbered in the order they first joined.
    pub device: i32,
    /// Its device's ordinal in its own process (its configuration's device,
    /// as `CUDA_VISIBLE_DEVICES` numbers devices there).
    pub ordinal: Recorded<u32>,
    /// The identity of its device (the same for every member of the device).
    pub device_id: Recorded<DeviceId>,
    /// The slot fails its checks: its figures are not to be believed (and
    /// admission refuses while it does).
    pub corrupt: bool,
    /// Tags it declared evictable ([`Pool::set_ledger_evictable`](crate::Pool::set_ledger_evictable)):
    /// what other members' pressure may pause.
    pub n_evictable_tags: u32,
    /// What the ledger admitted it: mapped plus reserved bytes.
    pub admitted_bytes: u64,
    /// Physical bytes its pool holds.
    pub mapped_bytes: u64,
    /// Admitted for its reservations, not yet drawn on.
    pub reserved_bytes: u64,
    /// Bytes of its pause backups, as of its last pause, resume or trim.
    pub backed_up_bytes: u64,
    /// Host bytes its backups hold (pinned, pageable, mmap; not disk).
    pub host_admitted_bytes: u64,
    /// Admissions granted.
    pub n_admissions: u64,
    /// Admissions refused.
    pub n_refused: u64,
    /// Time its admissions took, retries and waits for other members included.
    pub admission_wait: Duration,
    /// Pressure requests it posted (it could not be admitted and asked the others).
    pub n_pressure_asked: u64,
    /// Pressure requests of other members it answered.
    pub n_pressure_answered: u64,
}

/// A ledger as a whole and one device's budget (`vpmm_ledger_info`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LedgerInfo {
    /// The device of `budget_bytes` and `admitted_bytes` (the ledger's index).
    pub device: i32,
    /// That device's identity; `None` when no device took the index yet.
    pub device_id: Option<Recorded<DeviceId>>,
    /// Device indices taken so far (0 to `n_devices - 1`).
    pub n_devices: u32,
    /// That device's budget; 0 = not set (no member of it yet).
    pub budget_bytes: u64,
    /// Bytes admitted to that device's members.
    pub admitted_bytes: u64,
    /// The host budget of backups; 0 = not set (no bound).
    pub host_budget_bytes: u64,
    /// Host bytes admitted to every member's backups.
    pub host_admitted_bytes: u64,
    /// Pressure requests posted so far, by every member.
    pub n_pressure_requests: u64,
    /// Slots in use, every device (live, or corrupt).
    pub n_members: u32,
    /// Slots that fail their checks.
    pub n_corrupt: u32,
    /// The device's budget word fails its check (admission refuses).
    pub budget_corrupt: bool,
    /// The host budget's word fails its check.
    pub host_budget_corrupt: bool,
    /// Every member, of every device, in slot order.
    pub members: Vec<LedgerMember>,
}

/// What a member's pause does when the ledger's host budget refuses its
/// backups ([`Pool::set_ledger_fallback`](crate::Pool::set_ledger_fallback)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LedgerFallback {
    /// The pause fails with `OutOfMemory`, nothing paused (the default).
    None,
    /// The pause's new backups go to the disk store, in the pool's backup
    /// directory (`vpmm_pool_set_backup_dir`, else `VPMM_BACKUP_DIR`); without
    /// one the refusal stands.
    Disk,
}

impl LedgerFallback {
    pub(crate) fn flags(self) -> u32 {
        match self {
            LedgerFallback::None => 0,
            LedgerFallback::Disk => sys::VPMM_LEDGER_FALLBACK_DISK,
        }
    }
}

impl Ledger {
    /// The most distinct devices (the ledger's indices 0-15) a ledger budgets.
    pub const DEVICES: u32 = sys::VPMM_LEDGER_DEVICES;
    /// The most members (pools) a ledger holds.
    pub const MEMBERS: u32 = sys::VPMM_LEDGER_MEMBERS;

    /// Names ledger `name` (1-64 characters of `[A-Za-z0-9_.-]`, not
    /// starting with `.`; the library judges it at each call). Opens nothing.
    ///
    /// Errors: `InvalidArgument` (a NUL byte in the name).
    pub fn new(name: &str) -> Result<Ledger> {
        CString::new(name)
            .map(|name| Ledger { name })
            .map_err(|_| Error::new(Status::InvalidArgument, format!("ledger name {:?} contains a NUL byte", name)))
    }

    /// The ledger's name.
    pub fn name(&self) -> &str {
        self.name.to_str().unwrap_or("")
    }

    /// The ledger as its segment says now: `device`'s budget and admitted
    /// bytes, the host budget, and every member (`vpmm_ledger_read`). Slots
    /// of dead processes are reclaimed on the way; the caller does not join.
    ///
    /// Errors: `InvalidArgument` (a bad name or device, no such ledger),
    /// `WrongState` (a segment of another user, of a mode other than 0600,
    /// of the wrong size or with a corrupt header).
    pub fn read(&self, device: u32) -> Result<LedgerInfo> {
        // SAFETY: plain data; struct_size set before the call.
        let mut info: sys::vpmm_ledger_info = unsafe { std::mem::zeroed() };
        info.struct_size = size_of::<sys::vpmm_ledger_info>() as u32;
        let mut raw: Vec<sys::vpmm_ledger_member> = (0..Ledger::MEMBERS)
            // SAFETY: plain data.
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        raw[0].struct_size = size_of::<sys::vpmm_ledger_member>() as u32;
        let mut n = 0u32;
        let dev = i32::try_from(device).unwrap_or(i32::MAX);
        // SAFETY: a NUL-terminated name, a writable info and MEMBERS writable
        // members of the stride members[0].struct_size says.
        check(unsafe {
            sys::vpmm_ledger_read(self.name.as_ptr(), dev, &mut info, raw.as_mut_ptr(), Ledger::MEMBERS, &mut n)
        })?;
        let members = raw
            .iter()
            .take(n.min(Ledger::MEMBERS) as usize)
            .map(|m| LedgerMember {
                slot: m.slot,
                pid: m.pid,
                device: m.device,
                ordinal: ordinal(m.ordinal),
                // A member's index that is no device's reads as unreadable in C already.
                device_id: device_id(m.device_id_state, m.device_id_hi, m.device_id_lo)
                    .unwrap_or(Recorded::Unreadable),
                corrupt: m.corrupt != 0,
                n_evictable_tags: m.n_evictable_tags,
                admitted_bytes: m.admitted_bytes,
                mapped_bytes: m.mapped_bytes,
                reserved_bytes: m.reserved_bytes,
                backed_up_bytes: m.backed_up_bytes,
                host_admitted_bytes: m.host_admitted_bytes,
                n_admissions: m.n_admissions,
                n_refused: m.n_refused,
                admission_wait: Duration::from_nanos(m.admission_wait_ns),
                n_pressure_asked: m.n_pressure_asked,
                n_pressure_answered: m.n_pressure_answered,
            })
            .collect();
        Ok(LedgerInfo {
            device: info.device,
            device_id: device_id(info.device_id_state, info.device_id_hi, info.device_id_lo),
            n_devices: info.n_devices,
            budget_bytes: info.budget_bytes,
            admitted_bytes: info.admitted_bytes,
            host_budget_bytes: info.host_budget_bytes,
            host_admitted_bytes: info.host_admitted_bytes,
            n_pressure_requests: info.n_pressure_requests,
            n_members: info.n_members,
            n_corrupt: info.n_corrupt,
            budget_corrupt: info.budget_corrupt != 0,
            host_budget_corrupt: info.host_budget_corrupt != 0,
            members,
        })
    }

    /// Sets the budget of the ledger's device `device` (0-15) to `bytes`, rounded down to 4 KiB,
    /// while the ledger runs (`vpmm_ledger_set_budget`). A lower budget takes
    /// nothing from anyone: nothing new is admitted until the members hold
    /// less.
    ///
    /// Errors: `InvalidArgument` (a bad name or device, no such ledger),
    /// `WrongState` (as [`Ledger::read`]).
    pub fn set_budget(&self, device: u32, bytes: u64) -> Result<()> {
        let dev = i32::try_from(device).unwrap_or(i32::MAX);
        // SAFETY: a NUL-terminated name.
        check(unsafe { sys::vpmm_ledger_set_budget(self.name.as_ptr(), dev, bytes) })
    }

    /// Sets the host budget: what the members' backups may hold in host
    /// memory (pinned, pageable, mmap; disk is not host memory). A pause
    /// whose backups would pass it fails with `OutOfMemory`, nothing paused,
    /// unless the member allowed the disk ([`LedgerFallback::Disk`]).
    ///
    /// Errors: those of [`Ledger::set_budget`].
    pub fn set_host_budget(&self, bytes: u64) -> Result<()> {
        // SAFETY: a NUL-terminated name.
        check(unsafe { sys::vpmm_ledger_set_budget(self.name.as_ptr(), sys::VPMM_LEDGER_HOST, bytes) })
    }

    /// Removes the ledger's name (`vpmm_ledger_remove`): members keep their
    /// mapping; the next pool to join makes a new ledger.
    ///
    /// Errors: `InvalidArgument` (a bad name, no such ledger).
    pub fn remove(&self) -> Result<()> {
        // SAFETY: a NUL-terminated name.
        check(unsafe { sys::vpmm_ledger_remove(self.name.as_ptr()) })
    }
}
