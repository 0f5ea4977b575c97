package vpmm

// #include <stdlib.h>
// #include "vpmm_go.h"
import "C"

import "unsafe"

// Backend selects the memory backend of a pool (VPMM_BACKEND_*).
type Backend int32

// The backends.
const (
	BackendAuto Backend = C.VPMM_BACKEND_AUTO // CUDA when a GPU is usable, else host
	BackendCUDA Backend = C.VPMM_BACKEND_CUDA
	BackendHIP  Backend = C.VPMM_BACKEND_HIP
	BackendHost Backend = C.VPMM_BACKEND_HOST // host memory: no GPU needed, for tests
)

// String is the kind's name as the library's one table of them spells it
// (vpmm_backend_kind_name: "auto", "cuda", "hip", "host", as VPMM_BACKEND and
// Pool.BackendName do); "" for a value that is no kind.
func (b Backend) String() string {
	name := C.vpmm_backend_kind_name(C.int32_t(b))
	if name == nil {
		return ""
	}
	return C.GoString(name)
}

// HandleSizeUnlimited for Config.MaxHandleSize: one physical handle per growth.
const HandleSizeUnlimited = ^uint64(0)

// DriverBudgetNever and DriverBudgetExact for Config.DriverBudget: never move
// pages to save memory (only at the limit), or no budget (page-exact within
// RemapSlack at any driver cost).
const (
	DriverBudgetNever = -2.0
	DriverBudgetExact = -1.0
)

// The placement chains for Config.Placement (VPMM_PLACEMENT_*).
const (
	PlacementDefault int32 = 0 // reap, best fit, grow within the driver budget, remap
	PlacementExact   int32 = 1 // reap, best fit, remap: page-exact at any driver cost
	PlacementViews   int32 = 2 // reap, best fit, views, remap
	PlacementPending int32 = 3 // the default with other streams' pending frees reused whole
)

// ViewsOff for Config.ViewMinSize: no request is served by a view.
const ViewsOff = ^uint64(0)

// Config is a pool's configuration, every field of vpmm_config. Start from
// DefaultConfig (the library's defaults) or ConfigFromEnv (the defaults with
// the VPMM_* environment variables applied); 0 means "the default" wherever
// vpmm.h says so.
type Config struct {
	Backend             Backend // env VPMM_BACKEND
	Device              int32   // device ordinal (ignored by the host backend); env VPMM_DEVICE
	PageSize            uint64  // accounting unit; 0 = backend granularity; env VPMM_PAGE_SIZE
	VASize              uint64  // VA reserved per chunk; 0 = backend default; env VPMM_VA_SIZE
	InitialPages        uint64  // pages mapped at creation; env VPMM_PAGES
	HostCapacity        uint64  // host backend: bytes it may hand out (0 = 1 GiB); env VPMM_HOST_CAPACITY
	MaxHandleSize       uint64  // 0 scaled, PageSize per page, HandleSizeUnlimited per growth; env VPMM_MAX_HANDLE_SIZE
	SmallSize           uint64  // requests up to this share pages (0 = PageSize/2, <256 off); env VPMM_SMALL_SIZE
	BackupCacheSize     uint64  // pinned bytes kept for backups after resume (0 = all); env VPMM_BACKUP_CACHE_SIZE
	MemoryLimit         uint64  // hard cap on mapped bytes (0 = none); env VPMM_MEMORY_LIMIT
	MemoryLimitFraction float64 // cap as a fraction of device memory (0 = none)
	WatermarkTrigger    float64 // pressure starts at this fraction of capacity (0 = 0.85)
	WatermarkStop       float64 // pressure ends at this fraction (0 = 0.65)
	BackupPinnedLimit   uint64  // most pinned bytes for backups (0 = no limit); env VPMM_BACKUP_PINNED_LIMIT
	HIPChunkSize        uint64  // HIP: largest hipMemCreate (0 = by ROCm version); env VPMM_HIP_CHUNK_SIZE
	PeerDevices         uint64  // CUDA: bit d = device d gets access (0 = none); env VPMM_PEER_DEVICES
	LargeRounding       uint64  // what untagged requests above SmallSize round up to (0 = PageSize; 512: pages shared); env VPMM_LARGE_ROUNDING
	RemapSlack          float64 // how far past the bytes asked for a malloc grows instead of remapping (0 = 0.015; negative = page-exact); env VPMM_REMAP_SLACK
	Exportable          uint64  // 1 = handles other processes can import (vpmm_pool_export, docs/ipc.md); env VPMM_EXPORTABLE
	ViewMinSize         uint64  // smallest untagged request a view may serve (0 = 64 MiB in the views chain, else none; ViewsOff = none); env VPMM_VIEW_MIN_SIZE
	DriverBudget        float64 // share of elapsed time the pool may spend moving pages (0 = 0.01; DriverBudgetNever, DriverBudgetExact); env VPMM_DRIVER_BUDGET
	Placement           int32   // the placement chain (PlacementDefault, PlacementExact, PlacementViews, PlacementPending); env VPMM_PLACEMENT
	BudgetClockUs       int32   // 0 = the budget counts wall time; N = each malloc and free stands for N us (replays); env VPMM_BUDGET_CLOCK_US
	Ledger              string  // the ledger the pool joins ("" = none): one memory budget shared with other processes' pools on the device (docs/ledger.md); env VPMM_LEDGER

	// configError is vpmm_config.config_error: a malformed VPMM_* variable
	// that NewPool reports.
	configError int32
}

// DefaultConfig is the library's defaults, ignoring the environment
// (vpmm_config_init_sized with VPMM_CONFIG_DEFAULTS_ONLY: the library writes
// no more than the struct this package was built with).
func DefaultConfig() Config {
	var c C.vpmm_config
	C.vpmm_config_init_sized(&c, C.uint32_t(C.sizeof_vpmm_config), C.VPMM_CONFIG_DEFAULTS_ONLY)
	return configFromC(&c)
}

// ConfigFromEnv is the library's defaults with the VPMM_* environment
// variables applied (vpmm_config_init_sized). A malformed variable makes
// NewPool fail with ErrInvalidArgument naming it.
func ConfigFromEnv() Config {
	var c C.vpmm_config
	C.vpmm_config_init_sized(&c, C.uint32_t(C.sizeof_vpmm_config), 0)
	return configFromC(&c)
}

func configFromC(c *C.vpmm_config) Config {
	return Config{
		Backend:             Backend(c.backend),
		Device:              int32(c.device),
		PageSize:            uint64(c.page_size),
		VASize:              uint64(c.va_size),
		InitialPages:        uint64(c.initial_pages),
		HostCapacity:        uint64(c.host_capacity),
		MaxHandleSize:       uint64(c.max_handle_size),
		SmallSize:           uint64(c.small_size),
		BackupCacheSize:     uint64(c.backup_cache_size),
		MemoryLimit:         uint64(c.memory_limit),
		MemoryLimitFraction: float64(c.memory_limit_fraction),
		WatermarkTrigger:    float64(c.watermark_trigger),
		WatermarkStop:       float64(c.watermark_stop),
		BackupPinnedLimit:   uint64(c.backup_pinned_limit),
		HIPChunkSize:        uint64(c.hip_chunk_size),
		PeerDevices:         uint64(c.peer_devices),
		LargeRounding:       uint64(c.large_rounding),
		RemapSlack:          float64(c.remap_slack),
		Exportable:          uint64(c.exportable),
		ViewMinSize:         uint64(c.view_min_size),
		DriverBudget:        float64(c.driver_budget),
		Placement:           int32(c.placement),
		BudgetClockUs:       int32(c.budget_clock_us),
		Ledger:              goStringOrEmpty(c.ledger),
		configError:         int32(c.config_error),
	}
}

func goStringOrEmpty(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// toC is cfg as a C vpmm_config. Its ledger, if any, points at a copy the
// library keeps for the life of the process (vpmm_option_parse), so the
// struct holds no Go or freed memory; a name that is not a ledger name is
// an ErrInvalidArgument.
func (cfg *Config) toC() (C.vpmm_config, error) {
	var c C.vpmm_config
	C.vpmm_config_init_sized(&c, C.uint32_t(C.sizeof_vpmm_config), C.VPMM_CONFIG_DEFAULTS_ONLY)
	c.backend = C.int32_t(cfg.Backend)
	c.device = C.int32_t(cfg.Device)
	c.config_error = C.int32_t(cfg.configError)
	c.page_size = C.uint64_t(cfg.PageSize)
	c.va_size = C.uint64_t(cfg.VASize)
	c.initial_pages = C.uint64_t(cfg.InitialPages)
	c.host_capacity = C.uint64_t(cfg.HostCapacity)
	c.max_handle_size = C.uint64_t(cfg.MaxHandleSize)
	c.small_size = C.uint64_t(cfg.SmallSize)
	c.backup_cache_size = C.uint64_t(cfg.BackupCacheSize)
	c.memory_limit = C.uint64_t(cfg.MemoryLimit)
	c.memory_limit_fraction = C.double(cfg.MemoryLimitFraction)
	c.watermark_trigger = C.double(cfg.WatermarkTrigger)
	c.watermark_stop = C.double(cfg.WatermarkStop)
	c.backup_pinned_limit = C.uint64_t(cfg.BackupPinnedLimit)
	c.hip_chunk_size = C.uint64_t(cfg.HIPChunkSize)
	c.peer_devices = C.uint64_t(cfg.PeerDevices)
	c.large_rounding = C.uint64_t(cfg.LargeRounding)
	c.remap_slack = C.double(cfg.RemapSlack)
	c.exportable = C.uint64_t(cfg.Exportable)
	c.view_min_size = C.uint64_t(cfg.ViewMinSize)
	c.driver_budget = C.double(cfg.DriverBudget)
	c.placement = C.int32_t(cfg.Placement)
	c.budget_clock_us = C.int32_t(cfg.BudgetClockUs)
	if cfg.Ledger != "" {
		name := C.CString(cfg.Ledger)
		defer C.free(unsafe.Pointer(name))
		var m msg
		if err := result(C.go_vpmm_config_set_ledger(&c, name, &m), &m); err != nil {
			return c, err
		}
	}
	return c, nil
}
