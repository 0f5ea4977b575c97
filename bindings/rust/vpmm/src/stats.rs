//! Plain-data snapshots: `Stats`, `TagStats`, `RegionInfo`.
use vpmm_sys as sys;

use crate::stream::Stream;

macro_rules! plain_struct {
    ($(#[$m:meta])* $name:ident from $raw:ty { $($(#[$fm:meta])* $f:ident,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name {
            $($(#[$fm])* pub $f: u64,)*
        }
        impl From<&$raw> for $name {
            fn from(r: &$raw) -> $name {
                $name { $($f: r.$f,)* }
            }
        }
    };
}

plain_struct! {
    /// A snapshot of a pool's counters (`vpmm_stats`), from
    /// [`Pool::stats`](crate::Pool::stats). Bytes unless the name says otherwise.
    Stats from sys::vpmm_stats {
        /// Physical memory owned by the pool (pages x page_size).
        mapped_bytes,
        /// VA chunks reserved.
        reserved_va_bytes,
        /// Page-rounded bytes of active regions (small-object pages in use
        /// included); paused allocations are in `paused_bytes`.
        live_bytes,
        /// Sum of the sizes asked for, over allocations not yet freed, active
        /// and paused alike (a paused allocation still holds its address).
        requested_bytes,
        /// Mapped bytes in free regions (reusable).
        free_bytes,
        /// Reserved VA with nothing mapped.
        hole_bytes,
        /// Old VAs still mapped after a remap, awaiting their event.
        zombie_bytes,
        /// Highest `mapped_bytes` so far.
        peak_mapped_bytes,
        /// Highest `live_bytes` so far.
        peak_live_bytes,
        /// Successful mallocs (small ones included).
        n_malloc,
        /// Successful frees.
        n_free,
        /// Defragmentations that remapped at least one page.
        n_defrag,
        /// Times physical memory was created for a malloc.
        n_grow,
        /// Pages created over the pool's life (initial ones included).
        pages_created,
        /// Bytes moved by remapping into holes.
        bytes_remapped,
        /// The pool's page size.
        page_size,
        /// Physical handles currently owned.
        handles,
        /// Physical handles created over the pool's life.
        handles_created,
        /// VA chunks reserved (count).
        va_chunks,
        /// Largest single free region.
        largest_free_bytes,
        /// Page bytes serving small allocations.
        small_bytes,
        /// Bytes of small allocations (class rounded).
        small_live_bytes,
        /// Small mallocs.
        n_small_malloc,
        /// Reuses of another stream's completed region.
        n_cross_stream_reuse,
        /// GPU-side waits inserted.
        n_stream_waits,
        /// Events recorded.
        n_events_recorded,
        /// Zombies unmapped after their event completed.
        n_zombies_reaped,
        /// Allocations not yet freed (small ones included), active and paused
        /// alike (`TagStats::n_live` counts active regions only).
        n_live,
        /// Page-rounded VA of paused allocations: physical memory released,
        /// in neither `live_bytes` nor `mapped_bytes`.
        paused_bytes,
        /// Host bytes holding backups of paused allocations.
        backup_bytes,
        /// Pinned host bytes cached for future backups.
        backup_cache_bytes,
        /// Allocations paused over the pool's life.
        n_pause,
        /// Allocations resumed over the pool's life.
        n_resume,
        /// Trim calls.
        n_trim,
        /// Physical bytes given back by trim.
        bytes_trimmed,
        /// The limit in force: memory_limit, else the device's memory.
        capacity_bytes,
        /// Sum of live reservations' sizes.
        reserved_bytes,
        /// Bytes of live allocations charged to reservations.
        reservation_used_bytes,
        /// What a new reservation or unreserved allocation may still take.
        available_bytes,
        /// The trigger watermark in bytes.
        watermark_trigger_bytes,
        /// The stop watermark in bytes.
        watermark_stop_bytes,
        /// 1 between crossing the trigger and falling below the stop mark.
        under_pressure,
        /// Allocations that failed with OutOfMemory.
        n_oom,
        /// Allocations that succeeded after the OOM callback asked to retry.
        n_oom_recovered,
        /// Pinned host bytes held for backups (in use + cached).
        backup_pinned_bytes,
        /// Backup bytes in pageable host memory (over the pinned limit).
        backup_pageable_bytes,
        /// Nanoseconds malloc and free spent in the driver's mapping and event calls.
        driver_ns,
        /// Those driver calls, counted.
        driver_calls,
        /// Host bytes of mmap-store backups, paused or retained.
        backup_mmap_bytes,
        /// Bytes of disk-store backup files.
        backup_disk_bytes,
        /// Backup bytes kept for active allocations (retained backups).
        backup_retained_bytes,
        /// Bytes unchanged re-pauses released without copying.
        backup_skipped_bytes,
        /// Mapped bytes lent to live views (their allocations' memory, at home).
        lent_bytes,
        /// Views held, live and idle (each holds VA only).
        n_views,
        /// VA reserved by views (counted in `reserved_va_bytes`).
        view_va_bytes,
        /// Mallocs served by a view.
        n_view_malloc,
        /// Of them, by an idle view whose handles were all free: no driver call.
        n_view_reuse,
        /// Handles moved to keep memory page-exact: what the driver budget charges.
        handles_moved,
        /// Mallocs that grew instead of moving pages (the budget could not pay).
        n_budget_grow,
        /// The bytes those mallocs created.
        bytes_budget_grown,
        /// Steps closed by [`Pool::mark_step`](crate::Pool::mark_step) (marks after the first).
        n_steps,
        /// The last closed step's wall time, ns.
        last_step_ns,
        /// Of it, nanoseconds in the driver for mallocs and frees.
        last_step_driver_ns,
        /// The wall time of every closed step, summed.
        steps_ns,
        /// Their driver time, summed: `steps_driver_ns / steps_ns` is the steps' driver share.
        steps_driver_ns,
    }
}

plain_struct! {
    /// Byte counts of one tag (`vpmm_tag_stats`), from
    /// [`Pool::tag_stats`](crate::Pool::tag_stats).
    TagStats from sys::vpmm_tag_stats {
        /// Active bytes (page-rounded; small slabs of the tag included).
        live_bytes,
        /// Bytes whose physical memory is released.
        paused_bytes,
        /// Host bytes holding backups.
        backup_bytes,
        /// Active regions (paused ones are in `n_paused`; `Stats::n_live`
        /// counts both).
        n_live,
        /// Paused regions.
        n_paused,
        /// Backup bytes kept past a resume (retained backups).
        retained_bytes,
    }
}

/// What a region of the pool's VA is (`VPMM_REGION_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegionKind {
    /// Handed out by malloc (`[X]` in the seed notation).
    Live,
    /// Mapped and reusable (`[-X]`).
    Free,
    /// Reserved VA, nothing mapped (`[*X]`).
    Hole,
    /// Old VA of remapped pages, unmapped once its event completes (`[~X]`).
    Zombie,
    /// Live pages serving small allocations (`[sX]`).
    Small,
    /// A paused allocation: VA kept, physical memory released (`[pX]`).
    Paused,
    /// Pages lent to a live view, at home in the pool's chunks (`[lX]`).
    Lent,
    /// A kind this crate does not know.
    Other(i32),
}

impl RegionKind {
    fn from_code(code: i32) -> RegionKind {
        match code {
            sys::VPMM_REGION_LIVE => RegionKind::Live,
            sys::VPMM_REGION_FREE => RegionKind::Free,
            sys::VPMM_REGION_HOLE => RegionKind::Hole,
            sys::VPMM_REGION_ZOMBIE => RegionKind::Zombie,
            sys::VPMM_REGION_SMALL => RegionKind::Small,
            sys::VPMM_REGION_PAUSED => RegionKind::Paused,
            sys::VPMM_REGION_LENT => RegionKind::Lent,
            other => RegionKind::Other(other),
        }
    }

    /// The mark of the seed notation: "" live, "-" free, "*" hole, "~"
    /// zombie, "s" small, "p" paused, "l" lent, "?" unknown.
    pub fn mark(self) -> &'static str {
        match self {
            RegionKind::Live => "",
            RegionKind::Free => "-",
            RegionKind::Hole => "*",
            RegionKind::Zombie => "~",
            RegionKind::Small => "s",
            RegionKind::Paused => "p",
            RegionKind::Lent => "l",
            RegionKind::Other(_) => "?",
        }
    }
}

/// One region of the pool's VA (`vpmm_region_info`), from
/// [`Pool::regions`](crate::Pool::regions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegionInfo {
    /// What the region is.
    pub kind: RegionKind,
    /// Start address.
    pub va: u64,
    /// Bytes (a page multiple).
    pub size: u64,
    /// `va` minus the start of its VA chunk.
    pub chunk_offset: u64,
    /// Index of the VA chunk, in reservation order.
    pub chunk: u32,
    /// Physical handles mapped in the region (0 for holes).
    pub handles: u32,
    /// Free/zombie: its event has not completed; small: blocks wait for
    /// another stream's event.
    pub event_pending: bool,
    /// Free: creation order; live: allocation order.
    pub id: u64,
    /// Live: bytes asked for; small pages: bytes asked for by their blocks.
    pub requested: u64,
    /// Live: allocating stream; free: freeing stream; else the default.
    pub stream: Stream,
}

impl From<&sys::vpmm_region_info> for RegionInfo {
    fn from(r: &sys::vpmm_region_info) -> RegionInfo {
        RegionInfo {
            kind: RegionKind::from_code(r.kind),
            va: r.va,
            size: r.size,
            chunk_offset: r.chunk_offset,
            chunk: r.chunk,
            handles: r.handles,
            event_pending: r.event_pending != 0,
            id: r.id,
            requested: r.requested,
            // SAFETY: a handle the pool was given, or NULL.
            stream: unsafe { Stream::from_raw(r.stream) },
        }
    }
}
