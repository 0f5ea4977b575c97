package vpmm

// #include "vpmm.h"
import "C"

// Stats is a snapshot of a pool's counters (vpmm_stats). Bytes unless the
// name says otherwise.
type Stats struct {
	MappedBytes           uint64 // Physical memory owned by the pool (pages x page_size).
	ReservedVABytes       uint64 // VA chunks reserved.
	LiveBytes             uint64 // Page-rounded bytes of active regions (small-object pages in use included; paused ones are in PausedBytes).
	RequestedBytes        uint64 // Sum of the sizes asked for, over allocations not yet freed, active and paused alike.
	FreeBytes             uint64 // Mapped bytes in free regions (reusable).
	HoleBytes             uint64 // Reserved VA with nothing mapped.
	ZombieBytes           uint64 // Old VAs still mapped after a remap, awaiting their event.
	PeakMappedBytes       uint64 // Highest `mapped_bytes` so far.
	PeakLiveBytes         uint64 // Highest `live_bytes` so far.
	NMalloc               uint64 // Successful mallocs (small ones included).
	NFree                 uint64 // Successful frees.
	NDefrag               uint64 // Defragmentations that remapped at least one page.
	NGrow                 uint64 // Times physical memory was created for a malloc.
	PagesCreated          uint64 // Pages created over the pool's life (initial ones included).
	BytesRemapped         uint64 // Bytes moved by remapping into holes.
	PageSize              uint64 // The pool's page size.
	Handles               uint64 // Physical handles currently owned.
	HandlesCreated        uint64 // Physical handles created over the pool's life.
	VAChunks              uint64 // VA chunks reserved (count).
	LargestFreeBytes      uint64 // Largest single free region.
	SmallBytes            uint64 // Page bytes serving small allocations.
	SmallLiveBytes        uint64 // Bytes of small allocations (class rounded).
	NSmallMalloc          uint64 // Small mallocs.
	NCrossStreamReuse     uint64 // Reuses of another stream's completed region.
	NStreamWaits          uint64 // GPU-side waits inserted.
	NEventsRecorded       uint64 // Events recorded.
	NZombiesReaped        uint64 // Zombies unmapped after their event completed.
	NLive                 uint64 // Allocations not yet freed (small ones included), active and paused alike (TagStats.NLive: active only).
	PausedBytes           uint64 // Page-rounded VA of paused allocations: physical memory released, not in LiveBytes nor MappedBytes.
	BackupBytes           uint64 // Host bytes holding backups of paused allocations.
	BackupCacheBytes      uint64 // Pinned host bytes cached for future backups.
	NPause                uint64 // Allocations paused over the pool's life.
	NResume               uint64 // Allocations resumed over the pool's life.
	NTrim                 uint64 // Trim calls.
	BytesTrimmed          uint64 // Physical bytes given back by trim.
	CapacityBytes         uint64 // The limit in force: memory_limit, else the device's memory.
	ReservedBytes         uint64 // Sum of live reservations' sizes.
	ReservationUsedBytes  uint64 // Bytes of live allocations charged to reservations.
	AvailableBytes        uint64 // What a new reservation or unreserved allocation may still take.
	WatermarkTriggerBytes uint64 // The trigger watermark in bytes.
	WatermarkStopBytes    uint64 // The stop watermark in bytes.
	UnderPressure         uint64 // 1 between crossing the trigger and falling below the stop mark.
	NOOM                  uint64 // Allocations that failed with OutOfMemory.
	NOOMRecovered         uint64 // Allocations that succeeded after the OOM callback asked to retry.
	BackupPinnedBytes     uint64 // Pinned host bytes held for backups (in use + cached).
	BackupPageableBytes   uint64 // Backup bytes in pageable host memory (over the pinned limit).
	DriverNs              uint64 // Nanoseconds malloc and free spent in the driver's mapping and event calls.
	DriverCalls           uint64 // Those driver calls, counted.
	BackupMmapBytes       uint64 // Host bytes of mmap-store backups, paused or retained.
	BackupDiskBytes       uint64 // Bytes of disk-store backup files.
	BackupRetainedBytes   uint64 // Backup bytes kept for active allocations (retained backups).
	BackupSkippedBytes    uint64 // Bytes unchanged re-pauses released without copying.
	LentBytes             uint64 // Mapped bytes lent to live views (their allocations' memory, at home).
	NViews                uint64 // Views held, live and idle (each holds VA only).
	ViewVABytes           uint64 // VA reserved by views (counted in ReservedVABytes).
	NViewMalloc           uint64 // Mallocs served by a view.
	NViewReuse            uint64 // Of them, by an idle view whose handles were all free: no driver call.
	HandlesMoved          uint64 // Handles moved to keep memory page-exact: what the driver budget charges.
	NBudgetGrow           uint64 // Mallocs that grew instead of moving pages (the budget could not pay).
	BytesBudgetGrown      uint64 // The bytes those mallocs created.
	NSteps                uint64 // Steps closed by MarkStep (marks after the first).
	LastStepNs            uint64 // The last closed step's wall time.
	LastStepDriverNs      uint64 // Of it, nanoseconds in the driver for mallocs and frees.
	StepsNs               uint64 // The wall time of every closed step, summed.
	StepsDriverNs         uint64 // Their driver time, summed: StepsDriverNs / StepsNs is the steps' driver share.
}

func statsFromC(s *C.vpmm_stats) Stats {
	return Stats{
		MappedBytes:           uint64(s.mapped_bytes),
		ReservedVABytes:       uint64(s.reserved_va_bytes),
		LiveBytes:             uint64(s.live_bytes),
		RequestedBytes:        uint64(s.requested_bytes),
		FreeBytes:             uint64(s.free_bytes),
		HoleBytes:             uint64(s.hole_bytes),
		ZombieBytes:           uint64(s.zombie_bytes),
		PeakMappedBytes:       uint64(s.peak_mapped_bytes),
		PeakLiveBytes:         uint64(s.peak_live_bytes),
		NMalloc:               uint64(s.n_malloc),
		NFree:                 uint64(s.n_free),
		NDefrag:               uint64(s.n_defrag),
		NGrow:                 uint64(s.n_grow),
		PagesCreated:          uint64(s.pages_created),
		BytesRemapped:         uint64(s.bytes_remapped),
		PageSize:              uint64(s.page_size),
		Handles:               uint64(s.handles),
		HandlesCreated:        uint64(s.handles_created),
		VAChunks:              uint64(s.va_chunks),
		LargestFreeBytes:      uint64(s.largest_free_bytes),
		SmallBytes:            uint64(s.small_bytes),
		SmallLiveBytes:        uint64(s.small_live_bytes),
		NSmallMalloc:          uint64(s.n_small_malloc),
		NCrossStreamReuse:     uint64(s.n_cross_stream_reuse),
		NStreamWaits:          uint64(s.n_stream_waits),
		NEventsRecorded:       uint64(s.n_events_recorded),
		NZombiesReaped:        uint64(s.n_zombies_reaped),
		NLive:                 uint64(s.n_live),
		PausedBytes:           uint64(s.paused_bytes),
		BackupBytes:           uint64(s.backup_bytes),
		BackupCacheBytes:      uint64(s.backup_cache_bytes),
		NPause:                uint64(s.n_pause),
		NResume:               uint64(s.n_resume),
		NTrim:                 uint64(s.n_trim),
		BytesTrimmed:          uint64(s.bytes_trimmed),
		CapacityBytes:         uint64(s.capacity_bytes),
		ReservedBytes:         uint64(s.reserved_bytes),
		ReservationUsedBytes:  uint64(s.reservation_used_bytes),
		AvailableBytes:        uint64(s.available_bytes),
		WatermarkTriggerBytes: uint64(s.watermark_trigger_bytes),
		WatermarkStopBytes:    uint64(s.watermark_stop_bytes),
		UnderPressure:         uint64(s.under_pressure),
		NOOM:                  uint64(s.n_oom),
		NOOMRecovered:         uint64(s.n_oom_recovered),
		BackupPinnedBytes:     uint64(s.backup_pinned_bytes),
		BackupPageableBytes:   uint64(s.backup_pageable_bytes),
		DriverNs:              uint64(s.driver_ns),
		DriverCalls:           uint64(s.driver_calls),
		BackupMmapBytes:       uint64(s.backup_mmap_bytes),
		BackupDiskBytes:       uint64(s.backup_disk_bytes),
		BackupRetainedBytes:   uint64(s.backup_retained_bytes),
		BackupSkippedBytes:    uint64(s.backup_skipped_bytes),
		LentBytes:             uint64(s.lent_bytes),
		NViews:                uint64(s.n_views),
		ViewVABytes:           uint64(s.view_va_bytes),
		NViewMalloc:           uint64(s.n_view_malloc),
		NViewReuse:            uint64(s.n_view_reuse),
		HandlesMoved:          uint64(s.handles_moved),
		NBudgetGrow:           uint64(s.n_budget_grow),
		BytesBudgetGrown:      uint64(s.bytes_budget_grown),
		NSteps:                uint64(s.n_steps),
		LastStepNs:            uint64(s.last_step_ns),
		LastStepDriverNs:      uint64(s.last_step_driver_ns),
		StepsNs:               uint64(s.steps_ns),
		StepsDriverNs:         uint64(s.steps_driver_ns),
	}
}

// TagStats are the byte counts of one tag (vpmm_tag_stats).
type TagStats struct {
	LiveBytes   uint64 // active bytes (page-rounded)
	PausedBytes uint64 // bytes whose physical memory is released
	BackupBytes uint64 // host bytes holding backups
	NLive       uint64 // active regions (paused ones are in NPaused; Stats.NLive counts both)
	NPaused     uint64 // paused regions
	// RetainedBytes are backup bytes kept past a resume (retained backups).
	RetainedBytes uint64
}

func tagStatsFromC(s *C.vpmm_tag_stats) TagStats {
	return TagStats{LiveBytes: uint64(s.live_bytes), PausedBytes: uint64(s.paused_bytes),
		BackupBytes: uint64(s.backup_bytes), NLive: uint64(s.n_live), NPaused: uint64(s.n_paused),
		RetainedBytes: uint64(s.retained_bytes)}
}

// RegionKind is what a region of the pool's VA is (VPMM_REGION_*).
type RegionKind int32

// The region kinds.
const (
	RegionLive   RegionKind = C.VPMM_REGION_LIVE   // handed out by malloc: [X]
	RegionFree   RegionKind = C.VPMM_REGION_FREE   // mapped, reusable: [-X]
	RegionHole   RegionKind = C.VPMM_REGION_HOLE   // reserved VA, nothing mapped: [*X]
	RegionZombie RegionKind = C.VPMM_REGION_ZOMBIE // old VA of remapped pages: [~X]
	RegionSmall  RegionKind = C.VPMM_REGION_SMALL  // pages serving small allocations: [sX]
	RegionPaused RegionKind = C.VPMM_REGION_PAUSED // paused allocation: [pX]
	RegionLent   RegionKind = C.VPMM_REGION_LENT   // pages lent to a live view, at home: [lX]
)

// Mark is the kind's mark in the seed notation ("" live, "-" free, ...).
func (k RegionKind) Mark() string {
	switch k {
	case RegionLive:
		return ""
	case RegionFree:
		return "-"
	case RegionHole:
		return "*"
	case RegionZombie:
		return "~"
	case RegionSmall:
		return "s"
	case RegionPaused:
		return "p"
	case RegionLent:
		return "l"
	}
	return "?"
}

// Region is one region of the pool's VA (vpmm_region_info).
type Region struct {
	Kind         RegionKind
	VA           uintptr // start address
	Size         uint64  // bytes (a page multiple)
	ChunkOffset  uint64  // VA minus the start of its chunk
	Chunk        uint32  // index of the VA chunk
	Handles      uint32  // physical handles mapped (0 for holes)
	EventPending bool    // free/zombie: its event has not completed
	ID           uint64  // free: creation order; live: allocation order
	Requested    uint64  // live: bytes asked for
	Stream       Stream  // live: allocating stream; free: freeing stream
}
