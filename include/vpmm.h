/*
 * libvpmm: a GPU virtual-memory pool allocator.
 *
 * The public header (vpmm_host_streams.h adds the host backend's streams, for
 * tests and `vpmm replay --gpu-lag`). Plain
 * C99 with fixed-width integers and opaque handles, so Rust (bindgen), Python
 * (ctypes), Go (cgo) and dlopen users can consume it unchanged. Every struct
 * that may grow starts with its own size (`struct_size`); callers set it to
 * sizeof() of the struct they compiled against, and the library only
 * reads/writes that many bytes. The idiom, free of warnings under -Wall
 * -Wextra (`= {sizeof s}` is not: it leaves the other fields without
 * initialisers):
 *     vpmm_stats s = {0};  s.struct_size = sizeof s;     (C)
 *     vpmm_stats s{};      s.struct_size = sizeof s;     (C++)
 *
 * The header is ordered by concept:
 *   versions, statuses and errors   what every call returns
 *   handles                         vpmm_pool, vpmm_stream, vpmm_reservation
 *   pool lifetime                   configuration, create, destroy
 *   allocation                      malloc, free, lookup
 *   streams                         synchronize, create, destroy, retire
 *   tags, pause and resume          tag scopes, pause/resume, backups
 *   limits and reservations         capacity, reservations, trim, callbacks
 *   observability                   stats, regions, text, option table
 *   sharing with other processes    exports, imports, descriptors over sockets
 *   run-time loading                vpmm_get_api's function table (vpmm_api_table.h)
 *   hooks                           default pools, PyTorch and CuPy entry points
 *                                   (vpmm_hooks.h)
 * The last two live in headers of their own that this one includes at its
 * end: include vpmm.h and both come with it.
 *
 * Conventions that hold for every function below unless its comment says
 * otherwise:
 *  - Return value is a vpmm_status. VPMM_OK (0) is success, and the only
 *    success: a call that finds nothing to do also returns VPMM_OK (where
 *    that matters, an _ex variant says how much it changed). Errors are
 *    positive and pinned forever. On error a human sentence naming the call
 *    and the offending value is available from vpmm_last_error() (or
 *    vpmm_last_error_copy()) on the same thread, and every out-parameter is
 *    left untouched.
 *  - Statuses every call may return, not repeated in each "Errors:" list:
 *    INVALID_ARGUMENT for a NULL pool or one already destroyed (a call on a
 *    destroyed pool is reported, not undefined, because the library keeps a
 *    small shell of it), OUT_OF_MEMORY when the library itself runs out of
 *    host memory, and INTERNAL when an invariant of the library breaks (a
 *    bug: please report it). Each "Errors:" list names the others.
 *  - A failed call leaves the pool exactly as it was before the call.
 *  - No C++ exception ever crosses this ABI.
 *  - Ownership: what a caller passes in (configs, attributes, tags, buffers)
 *    stays the caller's; strings are copied when kept. What the library hands
 *    out is owned as each function says: a pool or reservation until its
 *    destroy/release call, static strings and tables forever.
 *  - Thread safety: all vpmm_pool_* and vpmm_reservation_* functions may be
 *    called concurrently on the same pool from any thread (the pool
 *    serialises internally), except vpmm_pool_destroy, which must not race
 *    any other call on that pool. Functions without a pool are thread safe.
 *    Callbacks are called without the pool's lock held.
 */
#ifndef VPMM_H
#define VPMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define VPMM_API
#elif defined(__GNUC__)
#define VPMM_API __attribute__((visibility("default")))
#else
#define VPMM_API
#endif

/* ------------------------------------------------------------------------ */
/* Versions, statuses and errors                                            */
/* ------------------------------------------------------------------------ */
/* The version has a single source, project() in meson.build. The build
 * generates vpmm_version.h, installed beside this header, with
 * VPMM_VERSION_MAJOR, _MINOR, _PATCH, VPMM_VERSION_NUMBER (MAJOR * 10000 +
 * MINOR * 100 + PATCH), VPMM_VERSION_STRING ("MAJOR.MINOR.PATCH", what
 * vpmm_version() returns and what pkg-config reports) and VPMM_ABI_VERSION.
 *
 * VPMM_ABI_VERSION is also the SONAME suffix (libvpmm.so.1). It is bumped
 * only when an existing signature or struct layout changes incompatibly.
 * ABI 1 is the layout of this header after the 0.1 clean-up: while the
 * project was 0.1 and before any binding shipped, the ABI changed once, on
 * purpose (signed enumeration constants, no non-zero success status,
 * vpmm_region became vpmm_region_info with a struct_size, VPMM_ERR_TIMEOUT,
 * the host backend's streams in a header of their own), and the SONAME
 * stayed libvpmm.so.1 because nothing had been built against the old layout
 * outside this repository. From here on the ABI only grows: new functions,
 * new constants, new fields at the end of structs that carry struct_size.
 *
 * Tools that read this header straight from the source tree (bindgen over
 * include/vpmm.h, say) have no generated vpmm_version.h and see everything
 * except the version macros; compilers without __has_include always include
 * it. */
#if defined(__has_include)
#if __has_include("vpmm_version.h")
#include "vpmm_version.h"
#endif
#else
#include "vpmm_version.h"
#endif

/* VPMM_VERSION_STRING of the loaded library ("MAJOR.MINOR.PATCH"). Static
 * string; thread safe. */
VPMM_API const char* vpmm_version(void);
/* VPMM_ABI_VERSION of the loaded library. Thread safe. */
VPMM_API int32_t vpmm_abi_version(void);

/* The type of the status, backend-kind and region-kind constants.
 *
 * They are not #defines but typed constants, so that every language sees one
 * signed 32-bit type matching vpmm_status and the int32_t fields (bindgen
 * gives a plain `#define VPMM_OK 0` the type u32):
 *  - C (what bindgen reads): enumerators of anonymous enums, each an int
 *    constant expression usable in switch/case and static initialisers.
 *    bindgen, with its default options, turns each enum into
 *    `pub type _bindgen_ty_N = c_int` and its enumerators into
 *    `pub const VPMM_OK: _bindgen_ty_N = 0`, i32 in Rust. Each enum holds one
 *    negative member, VPMM_*_SIGNED_ = -1, which the library never returns or
 *    accepts: a C enumeration without a negative value has the type unsigned
 *    int (clang, and so bindgen: u32), with one it has int.
 *  - C++: `static const` constants of type vpmm_status / int32_t, the same
 *    names and values, so that `auto`, lambda return-type deduction and
 *    templates see int32_t rather than an unnamed enumeration type. Still
 *    constant expressions (switch/case, array bounds).
 * Either way the names are invisible to #if/#ifdef: test VPMM_VERSION_NUMBER
 * before using a newer constant. tests/api/test_c99_api.c checks that the C
 * values name the same statuses and kinds as the library's. */
typedef int32_t vpmm_status;

#ifdef __cplusplus
static const vpmm_status VPMM_OK = 0;
static const vpmm_status VPMM_ERR_INVALID_ARGUMENT = 1;
static const vpmm_status VPMM_ERR_OUT_OF_MEMORY = 2;
static const vpmm_status VPMM_ERR_UNKNOWN_POINTER = 3;
static const vpmm_status VPMM_ERR_WRONG_STATE = 4;
static const vpmm_status VPMM_ERR_UNSUPPORTED = 5;
static const vpmm_status VPMM_ERR_BACKEND = 6;
static const vpmm_status VPMM_ERR_INTERNAL = 7;
static const vpmm_status VPMM_ERR_TIMEOUT = 8;
static const vpmm_status VPMM_STATUS_SIGNED_ = -1;
#else
enum {
  VPMM_OK = 0,
  /* errors: positive */
  VPMM_ERR_INVALID_ARGUMENT = 1, /* null pointer, zero/overflowing size, bad enum, bad config */
  VPMM_ERR_OUT_OF_MEMORY = 2,    /* backend refused physical memory, VA, or host capacity */
  VPMM_ERR_UNKNOWN_POINTER = 3,  /* free/lookup of a pointer this pool did not return */
  VPMM_ERR_WRONG_STATE = 4,      /* operation not valid in the object's current state */
  VPMM_ERR_UNSUPPORTED = 5,      /* backend not built/not available, or lacks a capability */
  VPMM_ERR_BACKEND = 6,          /* the driver (or host OS) failed for a reason other than OOM */
  VPMM_ERR_INTERNAL = 7,         /* an invariant of the pool does not hold (a bug: please report) */
  VPMM_ERR_TIMEOUT = 8,          /* a wait with a timeout ran out; nothing changed */
  VPMM_STATUS_SIGNED_ = -1       /* never returned: makes the enum's type int (see above) */
};
#endif
/* 100 was VPMM_NO_OP (a non-zero success) before ABI 1; it is never returned. */

/* Readable name of a status, e.g. "VPMM_ERR_OUT_OF_MEMORY". Never NULL (unknown
 * codes give "VPMM_ERR_UNKNOWN"). Static string; thread safe. */
VPMM_API const char* vpmm_status_string(vpmm_status status);

/* The message of the last failed vpmm_* call on the calling thread, e.g.
 * "vpmm_pool_malloc: size 0 is not allowed". Never NULL: "" when no call on
 * this thread has failed yet. The string is thread-local and stays valid until
 * the next vpmm_* call on the same thread; copy it if you need it longer.
 * Never allocates. Thread safe (each thread reads its own message). */
VPMM_API const char* vpmm_last_error(void);

/* Copy the calling thread's vpmm_last_error() text into buf, truncated to
 * capacity - 1 bytes and always NUL-terminated when capacity > 0 (buf may be
 * NULL when capacity is 0). Returns the full length of the message without
 * the NUL, like snprintf: a return >= capacity means it was truncated. Does
 * not change the message. Never allocates; thread safe.
 *
 * The message is per OS thread, so it must be read on the thread that made
 * the failing call. Languages whose consecutive foreign calls may run on
 * different OS threads (Go: two cgo calls may) read it in the same C call
 * as the one that failed, through a small wrapper in their C preamble:
 *
 *   static inline vpmm_status go_vpmm_pool_malloc(vpmm_pool* p, uint64_t n,
 *       vpmm_stream s, void** out, char* err, size_t cap) {
 *     vpmm_status st = vpmm_pool_malloc(p, n, s, out);
 *     if (st != VPMM_OK) vpmm_last_error_copy(err, cap);
 *     return st;
 *   }
 *
 * Messages fit in 512 bytes. */
VPMM_API size_t vpmm_last_error_copy(char* buf, size_t capacity);

/* ------------------------------------------------------------------------ */
/* Handles                                                                  */
/* ------------------------------------------------------------------------ */
/* A pool: made by vpmm_pool_create (or vpmm_default_pool), owned by the
 * caller until vpmm_pool_destroy (a default pool by the library). Opaque. */
typedef struct vpmm_pool vpmm_pool;

/* A cudaStream_t / CUstream (CUDA backend), hipStream_t (HIP backend) or a
 * stream from vpmm_host_stream_create (host backend, vpmm_host_streams.h).
 * NULL is the backend's default stream. The pool never takes ownership of a
 * stream it did not create (see vpmm_pool_stream_create). */
typedef void* vpmm_stream;

/* A promise of capacity: made by vpmm_pool_reserve, owned by the caller
 * until vpmm_reservation_release. Opaque. */
typedef struct vpmm_reservation vpmm_reservation;

/* ------------------------------------------------------------------------ */
/* Pool lifetime: configuration, create, destroy                            */
/* ------------------------------------------------------------------------ */
/* vpmm_config.backend (int32_t); typed constants for the reason given at vpmm_status. */
#ifdef __cplusplus
static const int32_t VPMM_BACKEND_AUTO = 0;
static const int32_t VPMM_BACKEND_CUDA = 1;
static const int32_t VPMM_BACKEND_HIP = 2;
static const int32_t VPMM_BACKEND_HOST = 3;
static const int32_t VPMM_BACKEND_SIGNED_ = -1;
#else
enum {
  VPMM_BACKEND_AUTO = 0, /* CUDA when a GPU is usable, else host */
  VPMM_BACKEND_CUDA = 1,
  VPMM_BACKEND_HIP = 2,
  VPMM_BACKEND_HOST = 3,
  VPMM_BACKEND_SIGNED_ = -1 /* never accepted: makes the enum's type int */
};
#endif

/* vpmm_config.max_handle_size: one physical handle per growth, however large. */
#define VPMM_HANDLE_SIZE_UNLIMITED UINT64_MAX
/* vpmm_config.view_min_size: no request is served by a view. */
#define VPMM_VIEWS_OFF UINT64_MAX
/* vpmm_config.driver_budget: never move pages to save memory (only at the
 * memory limit or under pressure). */
#define VPMM_DRIVER_BUDGET_NEVER (-2.0)
/* vpmm_config.driver_budget: no budget: page-exact within remap_slack at any
 * driver cost (the behaviour before the budget). */
#define VPMM_DRIVER_BUDGET_EXACT (-1.0)
/* vpmm_config.placement: the placement chains (docs/design.md). */
#define VPMM_PLACEMENT_DEFAULT 0 /* reap, best fit, grow within the driver budget (taking another
                                  * stream's pending free in place, after a GPU-side wait, first),
                                  * remap */
#define VPMM_PLACEMENT_EXACT 1   /* reap, best fit, remap: page-exact at any driver cost */
#define VPMM_PLACEMENT_VIEWS 2   /* reap, best fit, views, remap (the default before the budget) */
#define VPMM_PLACEMENT_PENDING 3 /* reap, best fit, pending reuse, grow within the budget, remap */

typedef struct vpmm_config {
  uint32_t struct_size;   /* = sizeof(vpmm_config) */
  int32_t backend;        /* VPMM_BACKEND_*; env VPMM_BACKEND=auto|cuda|hip|host */
  int32_t device;         /* device ordinal (ignored by the host backend); env VPMM_DEVICE */
  int32_t config_error;   /* set by vpmm_config_init: index+1 of a malformed VPMM_* variable
                           * (reported by vpmm_pool_create); 0 = none (always, after
                           * vpmm_config_init_defaults). Leave as is. */
  uint64_t page_size;     /* accounting unit in bytes; multiple of the backend granularity;
                           * 0 = backend's recommended granularity (2 MiB on CUDA and host).
                           * env VPMM_PAGE_SIZE */
  uint64_t va_size;       /* bytes of VA reserved per chunk; 0 = backend default (8 TiB CUDA,
                           * 64 GiB host); more chunks are reserved on demand. env VPMM_VA_SIZE */
  uint64_t initial_pages; /* pages mapped eagerly at creation. env VPMM_PAGES */
  uint64_t host_capacity; /* host backend: physical bytes it may hand out (0 = 1 GiB).
                           * env VPMM_HOST_CAPACITY */
  uint64_t max_handle_size; /* how the pool cuts a growth into physical handles.
                             * 0 (default) = scaled handles: the shortfall S of one malloc becomes
                             * handles of max(page_size, S / 128), so small growths are page
                             * handles (page-exact remapping, the least memory) and one growth
                             * never costs more than ~129 handles (8 GiB: 64 MiB handles).
                             * page_size = one handle per page (the seed design).
                             * VPMM_HANDLE_SIZE_UNLIMITED = one handle per growth (fastest
                             * growth, partial handles cannot move). Any other multiple of
                             * page_size M = ceil(S / M) handles of at most M.
                             * Tagged (pausable) allocations get one handle per growth unless
                             * a finite cap is set. env VPMM_MAX_HANDLE_SIZE ("unlimited" for
                             * VPMM_HANDLE_SIZE_UNLIMITED). See docs/handles.md. */
  uint64_t small_size;     /* requests <= small_size are carved from shared pages (size classes)
                            * instead of taking whole pages; at most page_size; 0 = page_size / 2;
                            * a value below 256 (e.g. 1) turns this off: every request then takes
                            * whole pages. env VPMM_SMALL_SIZE. See docs/design.md. */
  uint64_t backup_cache_size; /* pinned host bytes kept cached for pause backups after a resume
                               * (0 = keep everything pinned so far). env VPMM_BACKUP_CACHE_SIZE */
  uint64_t memory_limit;   /* hard cap on mapped (physical) bytes; 0 = none. env VPMM_MEMORY_LIMIT
                            * ("8G", or "80%" of device memory = memory_limit_fraction) */
  double memory_limit_fraction; /* cap as a fraction of the device's total memory (0 = none);
                                 * the smaller of the two caps wins */
  double watermark_trigger; /* pressure starts when mapped >= trigger x capacity (0 = 0.85) */
  double watermark_stop;    /* pressure ends when mapped <= stop x capacity (0 = 0.65) */
  uint64_t backup_pinned_limit; /* most pinned host bytes the pool holds for pause backups, cached
                                 * ones included (0 = no limit). A backup that would pass it, or
                                 * whose pinning fails for want of memory, goes to pageable host
                                 * memory instead: the pause still succeeds and keeps the bytes,
                                 * at pageable copy speed. env VPMM_BACKUP_PINNED_LIMIT */
  uint64_t hip_chunk_size; /* HIP backend: largest physical handle one hipMemCreate makes (the
                            * ROCm < 7.0 chunked path; the pool's growth policy never asks for
                            * more). 0 (default) = by the runtime's version: 256 MiB below
                            * ROCm 7.0, no chunking from 7.0 on. Any other value chunks at that
                            * size (rounded down to the granularity) on every version;
                            * VPMM_HANDLE_SIZE_UNLIMITED never chunks. Ignored by the other
                            * backends. env VPMM_HIP_CHUNK_SIZE ("256M", "unlimited").
                            * See docs/backends.md. */
  uint64_t peer_devices; /* CUDA: other devices given read/write access to this pool's
                          * memory, bit d = device d (devices 0-63). Access is granted on
                          * every map, remap and resume (one cuMemSetAccess with one
                          * descriptor per device). Each peer must exist and be able to
                          * access this device (cuDeviceCanAccessPeer), else pool creation
                          * fails with UNSUPPORTED naming it. 0 (default) = this device only.
                          * The host backend rejects a non-zero value. env VPMM_PEER_DEVICES
                          * ("1,3"; "" or "none" = 0). See docs/multi-gpu.md. */
  uint64_t large_rounding; /* what untagged requests above small_size are rounded up to.
                            * 0 (default) = page_size: each such allocation is page aligned and
                            * owns whole pages (the seed's rule). A power of two from 256 to
                            * page_size, e.g. 512 (PyTorch's block rounding): allocations are
                            * aligned to it and may share their first and last page with their
                            * neighbours, so a 6.02 MiB tensor no longer holds 8 MiB. Pages still
                            * map whole: a partly live page stays mapped and moves with nothing.
                            * Tagged (pausable) allocations always own whole pages. The PyTorch
                            * facade (bindings/python vpmm.use_as_torch_allocator) sets 512 unless
                            * the variable is set. env VPMM_LARGE_ROUNDING. See docs/design.md. */
  double remap_slack; /* how far past the bytes asked for the pool may grow instead of moving
                       * pages. A malloc that finds no free region of its size either remaps
                       * free pages from elsewhere into one span (page-exact, but each page
                       * moved costs ~40 us of driver time on an H100) or grows by what the
                       * span lacks; it grows when that keeps the mapped bytes within
                       * (1 + remap_slack) x (the bytes asked for by live allocations, this one
                       * included), else it remaps. A training loop then settles: once its
                       * shapes were seen, its peak moments find their spans in place.
                       * 0 (default) = 0.015; a negative value = page-exact (always remap, the
                       * behaviour before this field). Ignored for tagged allocations. env
                       * VPMM_REMAP_SLACK ("0.02", "2%", or "exact"). See docs/handles.md. */
  uint64_t exportable;     /* 1 = every physical handle the pool creates can be shared with other
                            * processes (vpmm_pool_export): CUDA and HIP request POSIX file-
                            * descriptor handles from cuMemCreate / hipMemCreate, the host backend
                            * gives each handle a memfd of its own. 0 (default) = not exportable:
                            * vpmm_pool_export fails with UNSUPPORTED. Importing needs no flag.
                            * Pool creation fails with UNSUPPORTED where the device or driver
                            * cannot export. env VPMM_EXPORTABLE (0 or 1). See docs/ipc.md (what
                            * it costs, measured). */
  uint64_t view_min_size;  /* smallest untagged request a view may serve. A request of this size
                            * or more that no free region of the pool fits maps the free handles
                            * where they lie, in order, at a VA range of its own (a view) instead
                            * of moving free pages into one span (Phase 2). Nothing moves: the
                            * handles stay mapped at home too, lent to the view while it is live.
                            * After the free the view keeps its mappings, and the next request of
                            * its size takes it: with no driver call when its handles are all
                            * free again, else replacing only the handles something else took
                            * meanwhile (counted in bytes_remapped). So a training loop's largest
                            * tensors stop moving pages once the loop has been seen. A view's
                            * pointer lies outside the pool's chunks; views hold VA only, no
                             * memory of their own; a pool holds at most 32 (live and idle), and
                             * vpmm_pool_trim gives the idle ones back. Memory another stream freed
                             * while its work is still queued is taken too: the caller's stream
                             * then waits for that work on the GPU (the CPU never blocks). 0
                             * (default) = 64 MiB in the views chain (VPMM_PLACEMENT_VIEWS) and no
                             * views in the others; a size set here adds the views step to any
                             * chain; VPMM_VIEWS_OFF = no views in any chain (docs/handles.md,
                             * "Placement that learns the loop" and "A driver-time budget", has
                             * them measured). Rounded up to page_size.
                            * Pools with exportable = 1 make no views. env VPMM_VIEW_MIN_SIZE
                            * ("256M", or "off"). See docs/handles.md ("Views"). */
  double driver_budget; /* the share of elapsed time the pool may spend in the driver moving
                         * pages to stay page-exact. When a malloc would move pages (remap)
                         * and the pool's driver time, counted against its working time (the
                         * wall clock read every 64th malloc or free, a longer stretch than
                         * 100 ms between reads counted as 100 ms: a process idle while
                         * others use the GPU banks nothing; a token bucket: 1% of elapsed time accrues, up to 1% of
                         * 1 s, full at creation or 256 pages' worth if less; every driver
                         * call a malloc or free makes
                         * leaves it, moves, handle creation and events alike, so the share
                         * kept is the step's; a refused move empties it until 1 s passes
                         * with no move asked for), cannot pay for the
                         * move at ~75 us per 2 MiB page, the pool
                         * grows by what the request lacks instead, within memory_limit, the
                         * reservations and a ceiling of 1.10 x the bytes asked for; past
                         * those, or under memory pressure, pages move as before. A loop then
                         * stops moving pages once its shapes were seen, at the price of some
                         * memory (docs/handles.md, "A driver-time budget").
                         * 0 (default) = 0.01; VPMM_DRIVER_BUDGET_NEVER = never move pages to
                         * save memory (only at the limit); VPMM_DRIVER_BUDGET_EXACT = no
                         * budget: page-exact within remap_slack at any driver cost.
                         * env VPMM_DRIVER_BUDGET ("1%", "0.01", "0" or "never", "exact"). */
  int32_t placement;    /* the placement chain, VPMM_PLACEMENT_*: the steps a page-level
                         * request goes through until one serves it (docs/design.md,
                         * "Placement as a chain of steps"). 0 = VPMM_PLACEMENT_DEFAULT.
                         * env VPMM_PLACEMENT ("default", "exact", "views", "pending"; the
                         * names `vpmm replay --policy` takes). */
  int32_t budget_clock_us; /* what the driver budget counts time by. 0 (default) = the wall
                         * clock and the driver time measured; N > 0 = a modelled clock:
                         * every malloc and free stands for N microseconds of the program's
                         * work and every handle operation for its H100 cost (cuMemMap 1.6,
                         * cuMemSetAccess 41, cuMemUnmap 31, cuMemCreate 16, cuMemRelease 21
                         * us), so that a replay decides as a GPU run would, the same way
                         * every run (`vpmm replay` sets it, --op-time). env
                         * VPMM_BUDGET_CLOCK_US. */
  const char* ledger;   /* the ledger the pool joins (docs/ledger.md, include/vpmm_ledger.h): one
                         * memory budget shared with the pools of other processes on its
                         * device. NULL or "" (default) = none: nothing changes. Otherwise
                         * 1-64 characters of [A-Za-z0-9_.-], not starting with '.' (else
                         * vpmm_pool_create fails with INVALID_ARGUMENT). The string is read
                         * during vpmm_pool_create only (the pool keeps a copy); the caller
                         * owns it. vpmm_config_init points it at a copy of VPMM_LEDGER's text
                         * that the library keeps for the life of the process;
                         * vpmm_pool_get_config points it at the pool's copy, valid until
                         * vpmm_pool_destroy. A name given to vpmm_pool_create_ledger wins
                         * over this field. env VPMM_LEDGER. */
} vpmm_config;

/* Fill *config with defaults, then apply the VPMM_* environment variables named
 * above. Sizes accept a decimal or 0x-hex integer with an optional K/M/G/T
 * suffix (powers of 1024). A malformed variable is not silently ignored: it is
 * recorded in config->config_error and vpmm_pool_create then fails with
 * VPMM_ERR_INVALID_ARGUMENT naming the variable and its value.
 * Bytes written: sizeof(vpmm_config) as this library has it, unless
 * config->struct_size already holds the size of an earlier vpmm_config (112,
 * 120, 128, 136, 144, 152, 160 or 176 bytes: a program built against an older header
 * that sets it first), then only that many. New code that wants no guess
 * passes its size to vpmm_config_init_sized. Sets struct_size.
 * NULL config is ignored. Thread safe (reads the environment). */
VPMM_API void vpmm_config_init(vpmm_config* config);

/* Fill *config with the defaults only, ignoring the environment: for callers
 * that must not be steered by VPMM_* variables (libraries embedding a pool,
 * tests, bindings that take options of their own). Writes the bytes
 * vpmm_config_init would; sets struct_size.
 * NULL config is ignored. Thread safe. */
VPMM_API void vpmm_config_init_defaults(vpmm_config* config);

/* Flags of vpmm_config_init_sized. */
#define VPMM_CONFIG_DEFAULTS_ONLY 1u /* ignore the environment (as vpmm_config_init_defaults) */

/* vpmm_config_init (flags 0) or vpmm_config_init_defaults
 * (VPMM_CONFIG_DEFAULTS_ONLY) for a caller whose vpmm_config is struct_size
 * bytes (pass sizeof(vpmm_config) as the caller compiled it): writes
 * min(struct_size, the library's sizeof) bytes and sets config->struct_size
 * to that; nothing past it is touched, whatever config held before. A
 * program built against an older header gets the fields it knows;
 * vpmm_pool_create gives the others their defaults (their VPMM_* variables
 * do not reach such a config: pass NULL to vpmm_pool_create for those).
 * Errors: INVALID_ARGUMENT (NULL config, struct_size below 48 or over 65536,
 * unknown flags; nothing written). Thread safe (reads the environment). */
VPMM_API vpmm_status vpmm_config_init_sized(vpmm_config* config, uint32_t struct_size, uint32_t flags);

/* Create a pool. config may be NULL (= vpmm_config_init: environment
 * applies). The config is copied; the caller keeps ownership of it. On
 * success *out owns the pool, to be released with vpmm_pool_destroy; on
 * any error *out is set to NULL (unlike other out-parameters, which errors
 * leave untouched), so a program that skips the check fails on NULL, never
 * on an uninitialised pointer: check the status and print vpmm_last_error().
 * Errors: INVALID_ARGUMENT (null out, struct_size too small, bad field,
 * malformed environment variable, device out of range, a peer device that
 * does not exist or is the pool's own), UNSUPPORTED (backend not built, no
 * usable device, a device without VMM support, CUDA or HIP in a statically
 * linked program, which cannot load their runtimes: 'auto' takes the host
 * backend there; peer_devices on a backend
 * without peer access (host, HIP) or between devices without a P2P path),
 * OUT_OF_MEMORY (initial_pages or the VA could not be had), BACKEND (the
 * driver failed). Thread safe. */
VPMM_API vpmm_status vpmm_pool_create(const vpmm_config* config, vpmm_pool** out);

/* Destroy a pool: waits for the events of every free region and zombie (work
 * still queued on the GPU that touches pool memory completes first), then
 * unmaps and releases all physical memory and VA. Live and paused
 * allocations are released too: their pointers and backups become invalid;
 * reservations of the pool become invalid. NULL is a no-op (VPMM_OK). A
 * destroyed pool passed to any call gives INVALID_ARGUMENT.
 * Errors: none but the general ones. Not thread safe with respect to other
 * calls on the same pool (the caller ensures none runs or follows). */
VPMM_API vpmm_status vpmm_pool_destroy(vpmm_pool* pool);

/* The effective configuration of the pool (defaults resolved): page_size,
 * va_size, backend, ... config->struct_size must be set; at most that many
 * bytes are written. Errors: INVALID_ARGUMENT (null config, struct_size 0-3
 * or over 65536). Thread safe. */
VPMM_API vpmm_status vpmm_pool_get_config(vpmm_pool* pool, vpmm_config* config);

/* "cuda", "hip" or "host". Static string; NULL for a NULL or destroyed pool
 * (the reason is then in vpmm_last_error()). Thread safe. */
VPMM_API const char* vpmm_pool_backend_name(vpmm_pool* pool);

/* The name of backend kind `kind` (VPMM_BACKEND_*: "auto", "cuda", "hip",
 * "host"), as VPMM_BACKEND and vpmm_pool_backend_name spell it; NULL for a
 * value that is no kind. The library's one table of the names: a tool or
 * binding lists the kinds by asking for 0, 1, ... until NULL. Whether a kind
 * is built in is another question (vpmm_pool_create says UNSUPPORTED). The
 * string is static. Thread safe. */
VPMM_API const char* vpmm_backend_kind_name(int32_t kind);

/* ------------------------------------------------------------------------ */
/* Allocation                                                               */
/* ------------------------------------------------------------------------ */
/* Flags of an allocation. */
#define VPMM_ALLOC_HOST_BACKUP 1u /* pause keeps the bytes (in pinned host memory unless a store
                                   * flag below says where), resume restores them */
/* Where the backup of a VPMM_ALLOC_HOST_BACKUP allocation lives, and for how
 * long (see "Backup stores" at vpmm_pool_pause). Each needs
 * VPMM_ALLOC_HOST_BACKUP; MMAP and DISK exclude each other; neither = pinned. */
#define VPMM_ALLOC_BACKUP_MMAP 2u   /* pageable anonymous memory, returned to the OS at resume */
#define VPMM_ALLOC_BACKUP_DISK 4u   /* a file in the backup directory (attrs->backup_dir, else
                                     * vpmm_pool_set_backup_dir's, else VPMM_BACKUP_DIR) */
#define VPMM_ALLOC_RETAIN_BACKUP 8u /* the backup outlives resume: the next pause writes into it
                                     * again (same host address, same file), or skips the copy
                                     * when declared unchanged (VPMM_PAUSE_BACKUP_UNCHANGED) */

/* The backup store at `index` of the library's table, in flag order: 0 is
 * the default ("pinned", *flag 0), then "mmap" (VPMM_ALLOC_BACKUP_MMAP) and
 * "disk" (VPMM_ALLOC_BACKUP_DISK). Returns its static name and stores the
 * allocation flag that chooses it in *flag (may be NULL); NULL past the last
 * store, *flag untouched. For bindings that name the stores: they list them
 * by asking for 0, 1, ... until NULL instead of repeating the table.
 * Thread safe. */
VPMM_API const char* vpmm_backup_store_name(uint32_t index, uint32_t* flag);

typedef struct vpmm_alloc_attrs {
  uint32_t struct_size; /* = sizeof(vpmm_alloc_attrs) */
  uint32_t flags;       /* VPMM_ALLOC_* */
  const char* tag;      /* NULL or "" = untagged (not pausable); copied, at most 63 bytes */
  vpmm_reservation* reservation; /* charge the allocation to this reservation (NULL = none) */
  const char* backup_dir; /* VPMM_ALLOC_BACKUP_DISK: an existing directory for the backup file
                           * (copied, at most 4095 bytes). The pool opens it at the first
                           * call that names it and keeps it open: a relative path means the
                           * working directory of that call, and a later chdir or a rename of
                           * the directory changes nothing. NULL = the pool's default.
                           * Ignored without VPMM_ALLOC_BACKUP_DISK. */
} vpmm_alloc_attrs;

/* Allocate size bytes usable on `stream` in stream order. Requests above
 * config.small_size are rounded up to config.large_rounding: whole pages
 * (page aligned) by default, or e.g. 512 bytes (aligned to it, sharing their
 * first and last page with neighbours; the default pools' setting); smaller
 * ones are carved from shared pages in size classes (aligned to 256 bytes).
 * Inside a tag scope of this thread (vpmm_tag_scope_push) the allocation is
 * tagged as vpmm_pool_malloc_ex would tag it. Reuse across streams either
 * takes a region whose event already completed or inserts a GPU-side wait on
 * `stream`; the CPU does not wait for the GPU. When the pool runs out of
 * memory it first releases what it can (free memory is remapped, empty
 * small-object slabs it caches are given back), then calls the OOM callback (see
 * vpmm_pool_set_oom_callback) and retries as it asks. *out is owned by the
 * caller until vpmm_pool_free (or vpmm_pool_destroy).
 * Errors: INVALID_ARGUMENT (null out, size 0, size that overflows when
 * rounded), OUT_OF_MEMORY (backend refused memory, or the limit or a
 * reservation left too little; no allocation or mapping changed, though
 * empty slabs the pool cached may now be plain free memory), BACKEND.
 * Thread safe. */
VPMM_API vpmm_status vpmm_pool_malloc(vpmm_pool* pool, uint64_t size, vpmm_stream stream,
                                      void** out);

/* vpmm_pool_malloc with attributes. attrs may be NULL (= the calling
 * thread's innermost tag scope, or untagged). The tag is copied. The
 * backup store flags and directory are fixed for the allocation's life: a
 * disk-backed allocation without attrs->backup_dir takes the pool's
 * directory of the moment (vpmm_pool_set_backup_dir), else VPMM_BACKUP_DIR
 * (as it was when the pool was created: options are read once);
 * the malloc checks that the directory exists and the process may create
 * files in it (nothing is allocated otherwise); the files are made at the
 * first pause. A tagged
 * allocation owns whole physical handles (one handle for its shortfall when
 * it grows the pool), so pausing it releases exactly its memory; small
 * tagged requests share slabs of the same tag only. An allocation charged to
 * a reservation fails past the reservation's size unless the reservation
 * allows an overdraft (VPMM_RESERVE_OVERDRAFT_*).
 * Errors: those of vpmm_pool_malloc, plus INVALID_ARGUMENT for a bad
 * struct_size, unknown flags, a tag longer than VPMM_TAG_MAX_BYTES, an
 * unknown or released reservation, a store or retain flag without
 * VPMM_ALLOC_HOST_BACKUP, both store flags, or a tagged
 * VPMM_ALLOC_BACKUP_DISK allocation with no directory anywhere (none in
 * attrs, the pool or VPMM_BACKUP_DIR), an empty or over-long one, or one
 * that does not exist, is no directory or may not be written (the message
 * names it). Thread safe. */
VPMM_API vpmm_status vpmm_pool_malloc_ex(vpmm_pool* pool, uint64_t size, vpmm_stream stream,
                                         const vpmm_alloc_attrs* attrs, void** out);

/* Free a pointer returned by vpmm_pool_malloc(_ex) of this pool, in the
 * order of `stream`: work queued on `stream` before this call may still use
 * the memory; the pool reuses it on another stream only after that work
 * completes, or once that stream was made to wait for it on the GPU (the
 * design's Phase 2 harvest; and under the default chain, where the driver
 * budget refuses to move pages or there is nothing to move, the whole
 * region at its own address instead of growing). Freed on a stream other than the one it was allocated on, it
 * also waits for earlier work of the allocating stream that may still use
 * it (the pool may have handed it out on that stream while such work was
 * queued): `stream` waits for that work on the GPU (counted in
 * n_stream_waits); the CPU never does. NULL ptr is a
 * no-op (VPMM_OK). A paused allocation may be
 * freed: its backup is dropped.
 * Errors: UNKNOWN_POINTER (not from this pool, already freed, or an
 * interior pointer), BACKEND. Thread safe. */
VPMM_API vpmm_status vpmm_pool_free(vpmm_pool* pool, void* ptr, vpmm_stream stream);

/* Find the allocation that contains ptr (interior pointers allowed):
 * *base (may be NULL) receives its start, *size (may be NULL) the bytes
 * asked for. Errors: INVALID_ARGUMENT (null ptr), UNKNOWN_POINTER (ptr is in
 * no allocation of this pool). Thread safe. */
VPMM_API vpmm_status vpmm_pool_lookup(vpmm_pool* pool, const void* ptr, void** base,
                                      uint64_t* size);

/* ------------------------------------------------------------------------ */
/* Streams                                                                  */
/* ------------------------------------------------------------------------ */
/* Block the calling thread until all work queued on `stream` completes.
 * The pool's lock is not held meanwhile. Errors: INVALID_ARGUMENT (not a
 * stream of the pool's backend), WRONG_STATE (a held host stream, or one
 * whose work waits on a held host stream: it would never complete),
 * BACKEND. Thread safe. */
VPMM_API vpmm_status vpmm_pool_stream_synchronize(vpmm_pool* pool, vpmm_stream stream);

/* Create a stream of the pool's backend (a non-blocking CUstream on CUDA, a
 * hipStream_t on HIP, a host stream on the host backend), for callers
 * without a runtime of their own (bindings, the replay tool). *out is owned
 * by the caller and released with vpmm_pool_stream_destroy of the same pool.
 * Errors: INVALID_ARGUMENT (null out), UNSUPPORTED (the driver lacks stream
 * creation), BACKEND. Thread safe. */
VPMM_API vpmm_status vpmm_pool_stream_create(vpmm_pool* pool, vpmm_stream* out);

/* Destroy a stream made by vpmm_pool_stream_create: retires it
 * (vpmm_pool_stream_retire), then destroys it with the backend. A host
 * stream is drained first (its queued work runs, even if held); a CUDA or
 * HIP stream's queued work completes after the call, as the driver's own
 * destroy lets it, and the events the retire recorded keep the pool from
 * reusing memory before it has. Afterwards the handle is dead: host stream
 * handles are never reused, and the pool refuses its own copy stream, so a
 * stale handle is INVALID_ARGUMENT rather than another stream's destroy.
 * Errors: INVALID_ARGUMENT (NULL/default stream, a stream already destroyed,
 * the pool's own copy stream), WRONG_STATE (host: its work waits on a held
 * stream; nothing is destroyed, destroy again after the release), BACKEND.
 * Thread safe, but the caller must not use the stream meanwhile. */
VPMM_API vpmm_status vpmm_pool_stream_destroy(vpmm_pool* pool, vpmm_stream stream);

/* Tell the pool a stream is about to be destroyed. The pool records the
 * stream's completion event lazily (a free costs no driver call), so before a
 * caller destroys a stream it freed or allocated pool memory on, it calls
 * this: the pool records the events it still needs now, while the stream
 * exists (allocations made on it keep theirs, so pausing them later never
 * touches the dead stream). Afterwards
 * the stream must not be passed to the pool again. Streams that live as long
 * as the pool (the default stream, per-thread streams, framework stream
 * pools) never need it. Without it the pool notices the vanished stream when
 * recording fails and falls back to one device-wide synchronisation (correct,
 * but it blocks the CPU once). Errors: INVALID_ARGUMENT (the pool's own copy
 * stream), BACKEND. Thread safe. */
VPMM_API vpmm_status vpmm_pool_stream_retire(vpmm_pool* pool, vpmm_stream stream);

/* ------------------------------------------------------------------------ */
/* Tags, pause and resume                                                   */
/* ------------------------------------------------------------------------ */
/* A tag names a group of allocations that pause and resume together: set
 * per allocation (vpmm_alloc_attrs.tag) or per thread (a tag scope).
 * Longest tag accepted by vpmm_alloc_attrs.tag / vpmm_tag_scope_push (bytes,
 * without the NUL). */
#define VPMM_TAG_MAX_BYTES 63

/* Thread-local tag scope for callers that cannot pass attributes (allocator
 * hooks, Python): until the matching pop, vpmm_pool_malloc and
 * vpmm_pool_malloc_ex(attrs = NULL) on this thread, with any pool, use
 * (tag, flags). Scopes nest; pop restores the enclosing one. The tag is
 * copied (NULL or "" = untagged). A scope belongs to its thread: open scopes
 * are dropped when the thread exits.
 * Errors: push: INVALID_ARGUMENT (tag longer than VPMM_TAG_MAX_BYTES, unknown
 * flags), OUT_OF_MEMORY; pop: WRONG_STATE when no scope is open on this
 * thread. Thread safe (each thread has its own scopes). */
VPMM_API vpmm_status vpmm_tag_scope_push(const char* tag, uint32_t flags);
VPMM_API vpmm_status vpmm_tag_scope_pop(void);

/* vpmm_tag_scope_push with attributes: the scope carries attrs->tag,
 * attrs->flags and attrs->backup_dir (all copied), so that allocator hooks
 * and Python regions choose a backup store and directory per scope. attrs
 * NULL = an untagged scope. Closed by vpmm_tag_scope_pop like any scope.
 * Errors: INVALID_ARGUMENT (bad struct_size, unknown flags or a combination
 * vpmm_pool_malloc_ex refuses, a tag longer than VPMM_TAG_MAX_BYTES, a
 * backup_dir that is empty or longer than 4095 bytes, a non-NULL
 * reservation: a scope spans every pool, a reservation belongs to one),
 * OUT_OF_MEMORY. A disk-backed scope without a directory is accepted: the
 * pool's directory applies at each malloc (which fails when there is none).
 * Thread safe (each thread has its own scopes). */
VPMM_API vpmm_status vpmm_tag_scope_push_ex(const vpmm_alloc_attrs* attrs);

/* The first names of vpmm_tag_scope_push/pop, kept for existing callers:
 * the same functions (a scope is no region of address space, which is what
 * vpmm_region_info describes), with the same errors and thread safety; a
 * push of either name is closed by a pop of either. Error messages name the
 * function called. */
VPMM_API vpmm_status vpmm_region_push(const char* tag, uint32_t flags);
VPMM_API vpmm_status vpmm_region_pop(void);

/* Pause every live allocation with `tag` (NULL = every tagged allocation):
 * waits for the work queued on each allocation's stream (on the GPU when
 * there are backups), copies the bytes of VPMM_ALLOC_HOST_BACKUP allocations
 * to their backup store (pinned host memory unless the allocation chose mmap
 * or disk, see "Backup stores" below; pinned buffers are reused across
 * pauses; past backup_pinned_limit, pageable memory), and unmaps and
 * releases their physical memory. Copies and releases overlap (batches of
 * copies on one copy stream, each batch released once its copies
 * completed); the call returns when everything is released. Their addresses
 * stay reserved and are never handed to anybody else; touching them faults
 * until resume. Nothing with that tag active is not an error: VPMM_OK (use
 * vpmm_pool_pause_ex to learn whether anything changed). The backups are
 * owned by the pool.
 * Errors: INVALID_ARGUMENT (tag never used by this pool, tag too long),
 * OUT_OF_MEMORY (no host memory or disk space for a backup: nothing with
 * that tag is paused), UNSUPPORTED (backups asked of a backend that cannot
 * copy device memory to the host: nothing is paused), BACKEND (a wait, copy,
 * file write or unmap failed; or a backup file could not be created, e.g.
 * a directory removed since the malloc: then nothing is paused). After BACKEND
 * every allocation is either paused with a complete backup or still active
 * with its bytes intact (vpmm_pool_tag_stats says how many of each); calling
 * again pauses the rest. Thread safe; blocks the calling thread (and other
 * pool calls) while it runs. */
VPMM_API vpmm_status vpmm_pool_pause(vpmm_pool* pool, const char* tag);
/* vpmm_pool_pause that also reports, on success, in *n_changed (may be NULL)
 * how many regions it paused: one per allocation, one per small-object page
 * (the unit of vpmm_tag_stats.n_live); 0 when nothing with that tag was
 * active. Left untouched on error. Errors and thread safety: those of
 * vpmm_pool_pause. */
VPMM_API vpmm_status vpmm_pool_pause_ex(vpmm_pool* pool, const char* tag, uint64_t* n_changed);

/* Backup stores. A VPMM_ALLOC_HOST_BACKUP allocation's bytes live, while it
 * is paused, in one of three stores, chosen per allocation (its flags, or
 * the tag scope's):
 *   pinned (default)        page-locked host memory: copies at link speed;
 *                           buffers are cached across pauses (backup_cache_size)
 *                           and stay resident;
 *   VPMM_ALLOC_BACKUP_MMAP  anonymous pageable memory, mapped at pause and
 *                           unmapped at resume: host memory returns to the OS.
 *                           Its bytes move through a few pinned staging slots
 *                           (pinned for the call, unpinned after it);
 *   VPMM_ALLOC_BACKUP_DISK  one file per allocation in its backup directory
 *                           (vpmm-backup-XXXXXX), created and sized at the
 *                           first pause, overwritten in place by later ones (the
 *                           footprint stays constant), removed when the
 *                           allocation is freed or the pool destroyed; written
 *                           and read in large chunks (direct I/O where the file
 *                           system allows it) through the staging slots. A
 *                           process that dies leaves its files behind. Each
 *                           file stays open in the pool from its first pause
 *                           until the allocation is freed (one descriptor per
 *                           disk-backed allocation that paused) and is never
 *                           opened again by its name: a link or file put at its
 *                           name is never written, loaded or removed.
 * With VPMM_ALLOC_RETAIN_BACKUP the backup outlives the resume: it stays
 * with the active allocation, holding its bytes as of the last pause
 * (vpmm_pool_backup_lookup still finds it), and the next pause writes into
 * it again: same host address, same file. A disk file is kept after resume
 * anyway (for the footprint), but only a retained one still speaks for the
 * allocation's bytes. docs/design.md, "Choosing a backup store", has the
 * bandwidths measured. */

/* Flags of vpmm_pool_pause_flags. */
#define VPMM_PAUSE_BACKUP_UNCHANGED 1u /* the caller declares the allocations unchanged since
                                        * their last resume: retained backups are not copied */

/* vpmm_pool_pause_ex with flags. VPMM_PAUSE_BACKUP_UNCHANGED declares that
 * no allocation of `tag` was written since it was last resumed (frozen
 * weights between two weight updates, say): each one whose retained backup
 * holds its bytes as of its last pause (VPMM_ALLOC_RETAIN_BACKUP, paused
 * and resumed before, its copy complete) is released without copying, so
 * the pause costs the unmaps only. The others copy as usual: allocations
 * without a retained backup (never paused, no retain flag, a pause that
 * failed before its copy completed) and small-object pages (new blocks may
 * have been carved from them since). The declaration is not checked: bytes
 * written since the last resume are lost, replaced at the next resume by
 * the backup's. Without the flag every pause copies (this is
 * vpmm_pool_pause_ex). vpmm_stats.backup_skipped_bytes counts what was not
 * copied.
 * Errors: those of vpmm_pool_pause, plus INVALID_ARGUMENT for unknown
 * flags. Thread safety: that of vpmm_pool_pause. */
VPMM_API vpmm_status vpmm_pool_pause_flags(vpmm_pool* pool, const char* tag, uint32_t flags,
                                           uint64_t* n_changed);

/* The directory where VPMM_ALLOC_BACKUP_DISK allocations made from now on
 * without attrs->backup_dir keep their backup files (copied; NULL or ""
 * = none: VPMM_BACKUP_DIR, else such a malloc fails). Allocations made
 * before keep theirs. The directory must exist, and the process be able to
 * create files in it: it is opened here and kept open (a relative path
 * means today's working directory; a later chdir changes nothing). A path
 * whose directory was removed since the pool opened it is opened anew when
 * named again (here or in attrs->backup_dir). Errors: INVALID_ARGUMENT
 * (longer than 4095 bytes, no such directory, not one the process may
 * create files in, more than 65535 distinct directories in the pool).
 * Thread safe. */
VPMM_API vpmm_status vpmm_pool_set_backup_dir(vpmm_pool* pool, const char* dir);

/* Resume paused allocations with `tag` (NULL = all) at the same addresses:
 * new physical memory, mapped, and backups copied back (each copy queued as
 * soon as its allocation is mapped); returns once every copy completed.
 * The pool then holds no more memory than before the pause: as much cached
 * free memory as the resume created is given back (whole free handles
 * whose work completed, oldest first, counted in bytes_trimmed; the CPU
 * does not wait), as if the free pages had been moved under the paused
 * addresses (host backend: 4 pages paused, 4 pages malloc'd and freed,
 * resume: 4 mapped, 4 live, 0 free). When memory runs short
 * (memory_limit, the device) the pool first gives those free pages back
 * (as vpmm_pool_trim does, waiting for their events) so that they serve
 * the resume, then calls the OOM callback (vpmm_pool_set_oom_callback),
 * retrying as it asks, as a malloc does. Nothing with that tag paused is
 * not an error: VPMM_OK
 * (vpmm_pool_resume_ex says whether anything changed). On OUT_OF_MEMORY or
 * BACKEND (a disk backup that cannot be read included) the allocations
 * already resumed stay valid and every other one stays paused with its
 * backup intact: call again later. A backup that is not retained is given
 * back once its allocation resumed (pinned: to the cache; mmap: to the OS);
 * a disk file stays until the allocation is freed.
 * Errors: INVALID_ARGUMENT (tag never used by this pool, tag too long),
 * OUT_OF_MEMORY, BACKEND. Thread safe; blocks while it runs. */
VPMM_API vpmm_status vpmm_pool_resume(vpmm_pool* pool, const char* tag);
/* vpmm_pool_resume that also reports, on success, in *n_changed (may be NULL)
 * how many regions it resumed (0: nothing with that tag was paused). Left
 * untouched on error. Errors and thread safety: those of vpmm_pool_resume. */
VPMM_API vpmm_status vpmm_pool_resume_ex(vpmm_pool* pool, const char* tag, uint64_t* n_changed);

/* Flags of vpmm_pool_resume_flags. */
#define VPMM_RESUME_RETAIN_BACKUP 1u /* the backups of the allocations this call resumes outlive it,
                                      * as if they had VPMM_ALLOC_RETAIN_BACKUP until their next
                                      * resume (torch_memory_saver's retain_cpu_backup, read at
                                      * each resume) */

/* vpmm_pool_resume_ex with flags. With VPMM_RESUME_RETAIN_BACKUP each
 * resumed allocation keeps its backup (any store) after the call: the backup
 * still answers vpmm_pool_backup_lookup at the same host address, the next
 * pause of the allocation writes into it, and a pause declared unchanged
 * (VPMM_PAUSE_BACKUP_UNCHANGED) releases it without copying. The choice is
 * made again at every resume: a later resume without the flag gives back the
 * backups of allocations made without VPMM_ALLOC_RETAIN_BACKUP, as
 * vpmm_pool_resume does. Errors: those of vpmm_pool_resume, plus
 * INVALID_ARGUMENT for unknown flags. Thread safe; blocks while it runs. */
VPMM_API vpmm_status vpmm_pool_resume_flags(vpmm_pool* pool, const char* tag, uint32_t flags,
                                            uint64_t* n_changed);

/* Takes, now, the host buffers that a pause of `tag` (NULL: every tag) would
 * back up the VPMM_ALLOC_HOST_BACKUP allocations that are active now into,
 * and keeps them in the pool's backup cache. Only the pinned store's (the
 * mmap and disk stores pin nothing ahead, and an allocation that keeps a
 * retained backup needs no new buffer). Pinning is most of a first
 * pause's cost (16 GiB: 3.5 s against 0.31 s for a later pause on an H100);
 * after this call the next pause of those allocations finds its buffers
 * pinned and runs at copy speed. Buffers already cached are counted, not
 * pinned again. What is kept follows the cache's rules: backup_cache_size
 * caps the cached bytes (0 = no cap) and backup_pinned_limit the pinned ones
 * (past it a backup is pageable and is not kept). *cached_bytes (may be NULL)
 * receives the pinned bytes cached after the call (vpmm_stats.
 * backup_cache_bytes). A tag with nothing to back up is a success that pins
 * nothing.
 * Errors: INVALID_ARGUMENT (a tag never used with this pool),
 * OUT_OF_MEMORY (pinning failed for want of host memory or of the memlock
 * limit; what was pinned before the failure stays cached, and a pause backs
 * the rest up in pageable memory), UNSUPPORTED (the backend cannot copy
 * device memory to the host).
 * Thread safe, and it pins without holding the pool's lock: other threads
 * keep allocating, freeing and resuming while it runs (seconds for tens of
 * GiB), so it can run on a background thread right after the tagged memory
 * is allocated (the Python binding's pin_ahead does this). A pause that
 * starts meanwhile takes over: the call stops after the buffer it is
 * pinning and returns (VPMM_OK, what it pinned cached), the pause waits for
 * that buffer only, uses what was pinned and pins the rest itself, so
 * nothing is pinned twice and a pause of another tag is not held up by the
 * whole pinning. Allocations made after the call began, and those left by a
 * pause that took over, are not covered; calling it again covers them. */
VPMM_API vpmm_status vpmm_pool_prepare_backups(vpmm_pool* pool, const char* tag,
                                               uint64_t* cached_bytes);

/* The host backup of the allocation that contains ptr (interior pointers
 * allowed): *host (may be NULL) receives the address of ptr's byte in the
 * backup, *bytes (may be NULL) how many backup bytes follow it up to the
 * end of the allocation's region (page padding included). The backup is
 * owned by the pool. For a paused allocation it may be read (and written:
 * resume copies back whatever it holds) until the allocation is resumed or
 * freed, after which the buffer goes back to the pool's cache (pinned) or to
 * the OS (mmap) and the pointer must not be used. For an active allocation
 * with a retained backup (VPMM_ALLOC_RETAIN_BACKUP) the backup holds its
 * bytes as of its last pause, and stays valid until the allocation is
 * paused (then it is the paused allocation's backup, at the same address) or
 * freed; writing it then changes what an unchanged re-pause
 * (VPMM_PAUSE_BACKUP_UNCHANGED) restores.
 * Errors: INVALID_ARGUMENT (null ptr), UNKNOWN_POINTER (ptr is not in
 * an allocation of this pool), WRONG_STATE (the allocation is active
 * without a retained backup that completed a pause, or was paused without
 * VPMM_ALLOC_HOST_BACKUP), UNSUPPORTED (the backup is a file of the disk
 * store: it has no host address; the message names the file). Thread safe;
 * the caller must not race it with a pause, resume or free of the same
 * allocation. */
VPMM_API vpmm_status vpmm_pool_backup_lookup(vpmm_pool* pool, const void* ptr, void** host,
                                             uint64_t* bytes);

typedef struct vpmm_tag_stats {
  uint32_t struct_size; /* = sizeof(vpmm_tag_stats), set by the caller */
  uint32_t reserved0;
  uint64_t live_bytes;    /* active bytes (page-rounded; small slabs of the tag included) */
  uint64_t paused_bytes;  /* bytes whose physical memory is released */
  uint64_t backup_bytes;  /* host bytes holding backups */
  uint64_t n_live;        /* active regions (paused ones are in n_paused, where
                           * vpmm_stats.n_live counts both) */
  uint64_t n_paused;      /* paused regions */
  uint64_t retained_bytes; /* backup bytes kept for active regions (VPMM_ALLOC_RETAIN_BACKUP) */
} vpmm_tag_stats;

/* Per-tag byte counts (tag NULL = all tagged allocations together).
 * out->struct_size must be set; at most that many bytes are written.
 * Errors: INVALID_ARGUMENT (null out, bad struct_size, tag never used by
 * this pool). Thread safe. */
VPMM_API vpmm_status vpmm_pool_tag_stats(vpmm_pool* pool, const char* tag, vpmm_tag_stats* out);

/* ------------------------------------------------------------------------ */
/* Limits, reservations, trim and out-of-memory recovery                    */
/* ------------------------------------------------------------------------ */
/* Capacity is config.memory_limit (or its fraction of device memory), else the
 * device's total memory (host backend: host_capacity). Mapped bytes never
 * exceed an explicit limit. A reservation promises bytes of capacity to its
 * owner: unreserved allocations and other reservations cannot take them. */

#define VPMM_RESERVE_TRY 0u   /* fail at once with OUT_OF_MEMORY if the bytes are not available */
#define VPMM_RESERVE_BLOCK 1u /* wait until releases make them available (timeout in _ex) */
#define VPMM_RESERVE_UPTO 2u  /* reserve what is available, up to bytes (at least 1 byte) */
/* What an allocation beyond its reservation does (default: fails with OUT_OF_MEMORY): */
#define VPMM_RESERVE_OVERDRAFT_IGNORE 0x10u /* allowed; counts against capacity as unreserved */
#define VPMM_RESERVE_OVERDRAFT_GROW 0x20u   /* the reservation grows by 1.25x the shortfall if it can */

/* Reserve `bytes` of the pool's capacity. *out is owned by the caller until
 * vpmm_reservation_release (or vpmm_pool_destroy). BLOCK waits without a
 * timeout. Errors: INVALID_ARGUMENT (null out, bytes 0, unknown flags, BLOCK
 * and UPTO together), OUT_OF_MEMORY (TRY/UPTO: nothing available; BLOCK:
 * more than the whole capacity), TIMEOUT (BLOCK in _ex: the timeout ran out;
 * nothing reserved). Thread safe. */
VPMM_API vpmm_status vpmm_pool_reserve(vpmm_pool* pool, uint64_t bytes, uint32_t flags,
                                       vpmm_reservation** out);
/* vpmm_pool_reserve with a timeout for VPMM_RESERVE_BLOCK (UINT64_MAX =
 * none). Errors and thread safety: those of vpmm_pool_reserve. */
VPMM_API vpmm_status vpmm_pool_reserve_ex(vpmm_pool* pool, uint64_t bytes, uint32_t flags,
                                          uint64_t timeout_ns, vpmm_reservation** out);
/* The reservation's size and the bytes currently charged to it. Either out
 * may be NULL. Errors: INVALID_ARGUMENT (a NULL, unknown or released
 * reservation: a released handle is refused, never taken for a newer
 * reservation). Thread safe. */
VPMM_API vpmm_status vpmm_reservation_info(vpmm_pool* pool, const vpmm_reservation* res,
                                           uint64_t* size, uint64_t* used);
/* Release a reservation and wake blocked reservers. Allocations still
 * charged to it are uncharged (they stay valid and count as unreserved).
 * The handle is dead afterwards. Errors: INVALID_ARGUMENT (a NULL, unknown
 * or already released reservation). Thread safe. */
VPMM_API vpmm_status vpmm_reservation_release(vpmm_pool* pool, vpmm_reservation* res);

/* Change the hard limit (0 = none). A limit below the mapped bytes first trims
 * free cached memory; if that is not enough the call fails with WRONG_STATE
 * and the old limit stays (the memory trimmed stays given back: the one
 * change a failed call leaves). Errors: WRONG_STATE. Thread safe. */
VPMM_API vpmm_status vpmm_pool_set_limit(vpmm_pool* pool, uint64_t bytes);

/* Give free cached physical memory back to the driver (what
 * torch.cuda.empty_cache() does) until at most keep_bytes stay mapped in free
 * regions: waits for the events of the regions it releases, then unmaps and
 * releases whole handles lying in free regions (a handle shared with a live
 * allocation stays). Zombies are reaped first, and idle views
 * (view_min_size) are given back whatever keep_bytes says, once their last
 * use completed (their VA is reserved again by the next view). Paused and
 * live memory is never touched. Errors: BACKEND. Thread safe. */
VPMM_API vpmm_status vpmm_pool_trim(vpmm_pool* pool, uint64_t keep_bytes);

/* Called, without the pool lock held, when a malloc or a resume runs out of
 * memory after the pool released what it could: `bytes` is the size asked
 * for (a resume: of the paused allocation it could not map). The callback
 * may free, pause or spill (calling back into the pool is allowed), and
 * returns non-zero to ask for a retry (at most 8 per call), zero to let the
 * call fail. `user` is passed through, never owned.
 * Setting replaces the previous callback; NULL removes it. Errors: none but
 * the general ones. Thread safe. */
typedef int (*vpmm_oom_fn)(vpmm_pool* pool, uint64_t bytes, void* user);
VPMM_API vpmm_status vpmm_pool_set_oom_callback(vpmm_pool* pool, vpmm_oom_fn fn, void* user);

/* Called, without the pool lock held, when mapped bytes cross the trigger
 * watermark upward (under_pressure = 1) or fall to the stop watermark
 * (under_pressure = 0). `user` is passed through, never owned. Setting
 * replaces the previous callback; NULL removes it. Errors: none but the
 * general ones. Thread safe. */
typedef void (*vpmm_pressure_fn)(vpmm_pool* pool, int under_pressure, uint64_t mapped_bytes,
                                 void* user);
VPMM_API vpmm_status vpmm_pool_set_pressure_callback(vpmm_pool* pool, vpmm_pressure_fn fn,
                                                     void* user);

/* ------------------------------------------------------------------------ */
/* Observability                                                            */
/* ------------------------------------------------------------------------ */
typedef struct vpmm_stats {
  uint32_t struct_size; /* = sizeof(vpmm_stats), set by the caller */
  uint32_t reserved0;
  uint64_t mapped_bytes;       /* physical memory owned by the pool (pages x page_size) */
  uint64_t reserved_va_bytes;  /* VA chunks reserved (views' VA included) */
  uint64_t live_bytes;         /* rounded bytes of active regions (whole pages, or large_rounding;
                                * small-object pages in use and memory lent to views
                                * included; an empty cached slab counts as free). A paused
                                * allocation is not here: its pages are in paused_bytes */
  uint64_t requested_bytes;    /* sum of sizes callers asked for, over allocations not yet
                                * freed, active and paused alike (a paused allocation is
                                * still allocated: its address is held until freed) */
  uint64_t free_bytes;         /* mapped bytes in free regions (reusable) */
  uint64_t hole_bytes;         /* reserved VA with nothing mapped */
  uint64_t zombie_bytes;       /* old VAs still mapped after a remap, awaiting their event */
  uint64_t peak_mapped_bytes;
  uint64_t peak_live_bytes;
  uint64_t n_malloc;           /* successful mallocs (small ones included) */
  uint64_t n_free;             /* successful frees */
  uint64_t n_defrag;           /* Phase 2 runs that remapped at least one page */
  uint64_t n_grow;             /* times physical memory was created for a malloc */
  uint64_t pages_created;      /* pages created over the pool's life (initial ones included) */
  uint64_t bytes_remapped;     /* bytes moved by remapping into holes, and bytes of existing
                                * handles mapped at a view */
  /* beyond the fixed set */
  uint64_t page_size;
  uint64_t handles;            /* physical handles currently owned */
  uint64_t handles_created;
  uint64_t va_chunks;          /* VA chunks reserved, views included (each is a chunk of the dump) */
  uint64_t largest_free_bytes; /* largest single free region */
  uint64_t small_bytes;        /* page bytes serving small allocations */
  uint64_t small_live_bytes;   /* bytes of small allocations (class rounded) */
  uint64_t n_small_malloc;
  uint64_t n_cross_stream_reuse; /* Phase 1 reuse of another stream's completed region (with
                                  * VPMM_PENDING_REUSE=1 also of one whose work is still queued,
                                  * after a GPU-side wait counted in n_stream_waits) */
  uint64_t n_stream_waits;     /* GPU-side waits inserted (Phase 2 harvest of pending regions) */
  uint64_t n_events_recorded;
  uint64_t n_zombies_reaped;
  uint64_t n_live;             /* allocations not yet freed (small ones included), active
                                * and paused alike, as requested_bytes counts them
                                * (vpmm_tag_stats.n_live counts active regions only) */
  uint64_t paused_bytes;       /* page-rounded VA of paused allocations (a paused small-object
                                * page counts whole): physical memory released, so in
                                * neither live_bytes nor mapped_bytes */
  uint64_t backup_bytes;       /* host bytes holding backups of paused allocations */
  uint64_t backup_cache_bytes; /* pinned host bytes cached for future backups */
  uint64_t n_pause;            /* allocations paused over the pool's life */
  uint64_t n_resume;           /* allocations resumed over the pool's life */
  uint64_t n_trim;             /* trim calls */
  uint64_t bytes_trimmed;      /* physical bytes given back by trim */
  uint64_t capacity_bytes;     /* the limit in force: memory_limit, else device total memory */
  uint64_t reserved_bytes;     /* sum of live reservations' sizes */
  uint64_t reservation_used_bytes; /* bytes of live allocations charged to reservations */
  uint64_t available_bytes;    /* what a new reservation or unreserved allocation may still take */
  uint64_t watermark_trigger_bytes;
  uint64_t watermark_stop_bytes;
  uint64_t under_pressure;     /* 1 between crossing the trigger and falling below the stop mark */
  uint64_t n_oom;              /* allocations that failed with OUT_OF_MEMORY */
  uint64_t n_oom_recovered;    /* allocations that succeeded after the OOM callback asked to retry */
  uint64_t backup_pinned_bytes;   /* pinned host bytes held for backups (in use + cached) */
  uint64_t backup_pageable_bytes; /* backup bytes in pageable host memory (over the pinned limit) */
  uint64_t driver_ns;    /* nanoseconds the threads calling malloc and free spent inside the
                          * driver's memory-mapping and event calls the pool made for them
                          * (create, map, set-access, unmap, release, event record/query,
                          * stream waits); pause, resume, trim and the pool's creation are
                          * not counted. Divided
                          * by a training step's time it is the step's share lost to the
                          * driver: a measure free of the step-to-step noise of timings */
  uint64_t driver_calls; /* those driver calls, counted */
  uint64_t backup_mmap_bytes;     /* host bytes of mmap-store backups (VPMM_ALLOC_BACKUP_MMAP),
                                   * paused or retained */
  uint64_t backup_disk_bytes;     /* bytes of disk-store backup files (kept until freed) */
  uint64_t backup_retained_bytes; /* backup bytes kept for active allocations
                                   * (VPMM_ALLOC_RETAIN_BACKUP), any store */
  uint64_t backup_skipped_bytes;  /* bytes unchanged re-pauses released without copying
                                   * (VPMM_PAUSE_BACKUP_UNCHANGED), over the pool's life */
  /* Views (vpmm_config.view_min_size; docs/handles.md, "Views") */
  uint64_t lent_bytes;    /* mapped bytes lent to live views: the memory of allocations served
                           * by a view, at its home in the pool's chunks (counted in
                           * live_bytes, shown as VPMM_REGION_LENT regions) */
  uint64_t n_views;       /* views held, live and idle (each holds VA only) */
  uint64_t view_va_bytes; /* VA reserved by views (counted in reserved_va_bytes) */
  uint64_t n_view_malloc; /* mallocs served by a view, over the pool's life */
  uint64_t n_view_reuse;  /* of them, by an idle view whose handles were all free at home:
                           * no driver call at all */
  /* The driver budget (vpmm_config.driver_budget; docs/handles.md) */
  uint64_t handles_moved;      /* handles moved to keep memory page-exact (Phase 2's harvests,
                                * views' refills), over the pool's life: what the budget charges
                                * (~75 us each on an H100) */
  uint64_t n_budget_grow;      /* mallocs that grew instead of moving pages because the budget
                                * could not pay for the move, over the pool's life */
  uint64_t bytes_budget_grown; /* the bytes those mallocs created */
  /* Steps (vpmm_pool_mark_step): the driver time of the program's own steps */
  uint64_t n_steps;             /* steps closed: marks after the first */
  uint64_t last_step_ns;        /* the last closed step's wall time, mark to mark */
  uint64_t last_step_driver_ns; /* of it, nanoseconds in the driver for mallocs and frees
                                 * (driver_ns counted within the step) */
  uint64_t steps_ns;            /* the wall time of every closed step, summed */
  uint64_t steps_driver_ns;     /* their driver time, summed: steps_driver_ns / steps_ns is the
                                 * share of the program's steps lost to the driver, which the
                                 * driver budget keeps under vpmm_config.driver_budget */
} vpmm_stats;

/* Snapshot the pool's counters into *stats (stats->struct_size must be set;
 * at most that many bytes are written). Errors: INVALID_ARGUMENT (null
 * stats, struct_size below 16 or over 65536). Thread safe. */
VPMM_API vpmm_status vpmm_pool_stats(vpmm_pool* pool, vpmm_stats* stats);

/* The program finished one step of its loop (a training iteration, a
 * decoding step); vpmm.torch's use_as_allocator() marks every optimizer
 * step. The
 * first mark opens the first step; each later one closes the step since the
 * previous mark and opens the next: vpmm_pool_stats then reports the
 * closed step's wall time and the driver time its mallocs and frees spent
 * (n_steps, last_step_ns, last_step_driver_ns, and the sums steps_ns and
 * steps_driver_ns): the share of the program's step the driver costs, which
 * is what the driver budget bounds, free of the step-to-step noise of
 * timing whole steps. Marks change no placement decision. Threads calling
 * it from several places (two optimizers) make shorter steps, one per mark.
 * Errors: INVALID_ARGUMENT (NULL pool). Thread safe; any thread. */
VPMM_API vpmm_status vpmm_pool_mark_step(vpmm_pool* pool);

/* The driver calls of a pool's backend by kind, over the pool's life: how
 * many and the nanoseconds spent inside them, from every thread and every
 * pool call (malloc, free, pause, resume, trim, exports, imports), where
 * vpmm_stats.driver_ns counts malloc's and free's share only. What it is
 * for: telling which calls make a slow step's driver time. On CUDA the
 * cost is per handle (docs/handles.md): a set-access over a range of N
 * separately mapped handles costs about N times one; event calls are
 * cheap one by one but may be many. The host backend's times are its own
 * (mmap, mprotect, host events). Copies and host-side work are not counted. */
typedef struct vpmm_driver_profile {
  uint32_t struct_size; /* = sizeof(vpmm_driver_profile), set by the caller */
  uint32_t reserved0;
  uint64_t create_calls, create_ns;             /* physical handles made (cuMemCreate) */
  uint64_t release_calls, release_ns;           /* handles released (cuMemRelease) */
  uint64_t map_calls, map_ns;                   /* a handle mapped at an address (cuMemMap) */
  uint64_t unmap_calls, unmap_ns;               /* a mapping removed (cuMemUnmap) */
  uint64_t set_access_calls, set_access_ns;     /* access set on a run of mappings (cuMemSetAccess) */
  uint64_t reserve_calls, reserve_ns;           /* address ranges reserved and given back
                                                 * (cuMemAddressReserve / cuMemAddressFree) */
  uint64_t event_record_calls, event_record_ns; /* events recorded on streams (cuEventRecord) */
  uint64_t event_query_calls, event_query_ns;   /* events asked whether complete (cuEventQuery) */
  uint64_t event_destroy_calls, event_destroy_ns; /* events destroyed */
  uint64_t stream_wait_calls, stream_wait_ns;   /* GPU-side waits of a stream on an event
                                                 * (cuStreamWaitEvent) */
} vpmm_driver_profile;

/* Snapshot the pool's driver profile into *out (out->struct_size must be
 * set; at most that many bytes are written). Counters only grow; subtract
 * two snapshots for an interval. Errors: INVALID_ARGUMENT (null out,
 * struct_size below 16 or over 65536). Thread safe; takes no lock. */
VPMM_API vpmm_status vpmm_pool_driver_profile(vpmm_pool* pool, vpmm_driver_profile* out);

/* vpmm_region_info.kind (int32_t); typed constants for the reason given at vpmm_status. */
#ifdef __cplusplus
static const int32_t VPMM_REGION_LIVE = 1;
static const int32_t VPMM_REGION_FREE = 2;
static const int32_t VPMM_REGION_HOLE = 3;
static const int32_t VPMM_REGION_ZOMBIE = 4;
static const int32_t VPMM_REGION_SMALL = 5;
static const int32_t VPMM_REGION_PAUSED = 6;
static const int32_t VPMM_REGION_LENT = 7;
static const int32_t VPMM_REGION_SIGNED_ = -1;
#else
enum {
  VPMM_REGION_LIVE = 1,   /* [X]  handed out by malloc */
  VPMM_REGION_FREE = 2,   /* [-X] mapped, reusable, carries stream + event */
  VPMM_REGION_HOLE = 3,   /* [*X] reserved VA, nothing mapped */
  VPMM_REGION_ZOMBIE = 4, /* old VA of remapped pages, unmapped once its event completes */
  VPMM_REGION_SMALL = 5,  /* live pages that serve small allocations */
  VPMM_REGION_PAUSED = 6, /* paused allocation: VA kept, physical memory released */
  VPMM_REGION_LENT = 7,   /* [lX] mapped pages lent to a live view: that allocation's memory,
                           * at home (the view's own VA is a chunk after the pool's chunks,
                           * holding one live region) */
  VPMM_REGION_SIGNED_ = -1 /* never reported: makes the enum's type int */
};
#endif

/* One region of the pool's VA (not to be confused with a tag scope, which
 * vpmm_region_push, the first name of vpmm_tag_scope_push, opens). Grows only
 * at the end; no padding on 64-bit targets. */
typedef struct vpmm_region_info {
  uint32_t struct_size;  /* = sizeof(vpmm_region_info), set by the caller (vpmm_pool_dump) */
  int32_t kind;          /* VPMM_REGION_* */
  uint64_t va;           /* start address */
  uint64_t size;         /* bytes (page multiple) */
  uint64_t chunk_offset; /* va minus the start of its VA chunk */
  uint32_t chunk;        /* index of the VA chunk, in reservation order */
  uint32_t handles;      /* physical handles mapped in this region (0 for holes) */
  int32_t event_pending; /* free/zombie: 1 if its event has not completed (0 when not recorded
                          * yet); small: 1 if blocks wait for another stream's event */
  uint32_t reserved0;    /* 0 */
  uint64_t id;           /* free: creation order; live: allocation order */
  uint64_t requested;    /* live: bytes asked for; small pages: bytes asked for by their live
                          * blocks (0 with event_pending 0: an empty cached slab, counted as free) */
  vpmm_stream stream;    /* live: allocating stream; free: freeing stream; else NULL */
} vpmm_region_info;

/* Copy every region of the pool, in ascending VA order, into buf (up to
 * capacity entries). *count receives the total number of regions, which may
 * exceed capacity (call again with a larger buffer). buf may be NULL when
 * capacity is 0.
 * When capacity > 0, buf[0].struct_size must be set to the caller's
 * sizeof(vpmm_region_info): it is the stride of the buffer (element i starts
 * i * struct_size bytes after buf). The library writes min(struct_size, its
 * own sizeof) bytes into each element, sets each element's struct_size to
 * the caller's value, and leaves any bytes beyond its own struct untouched,
 * so a caller built against a newer header can zero them to tell which
 * fields an older library filled.
 * Errors: INVALID_ARGUMENT (null pool/count, NULL buf with capacity,
 * struct_size smaller than the ABI 1 struct or over 65536). Thread safe (a
 * consistent snapshot). */
VPMM_API vpmm_status vpmm_pool_dump(vpmm_pool* pool, vpmm_region_info* buf, size_t capacity,
                                    size_t* count);

/* Call fn once per region in ascending VA order on a consistent snapshot,
 * outside the pool's lock (fn may call back into the pool). A non-zero return
 * from fn stops the walk. region->struct_size is the library's own sizeof: a
 * callback built against a newer header reads fields beyond its offset only
 * where struct_size covers them. The record is valid during the call only.
 * Errors: INVALID_ARGUMENT (null fn), OUT_OF_MEMORY. Thread safe. */
typedef int (*vpmm_region_info_fn)(const vpmm_region_info* region, void* user);
VPMM_API vpmm_status vpmm_pool_visit(vpmm_pool* pool, vpmm_region_info_fn fn, void* user);

/* Human-readable dump: the stats, then every region in the seed notation
 * ([X] live, [-X] free, [*X] hole, [~X] zombie, [sX] small slab, [pX] paused;
 * sizes in pages). Writes at most capacity bytes including the NUL into buf;
 * *needed (may be NULL) receives the full length + 1. The caller owns buf.
 * Errors: INVALID_ARGUMENT (NULL buf with capacity > 0). Thread safe. */
VPMM_API vpmm_status vpmm_pool_dump_text(vpmm_pool* pool, char* buf, size_t capacity,
                                         size_t* needed);

/* The pool's regions in the seed notation of docs/design.md, on one line:
 * sizes in pages; [X] live, [-X] free, [*X] hole, [~X] zombie, [sX] pages of
 * the small-object allocator, [pX] paused; regions in ascending VA order,
 * VA chunks separated by " | ". Example: "[4][*6][1][11][*42]". This is the
 * string `vpmm replay --expect-layout` compares and the notation of the
 * regions part of vpmm_pool_dump_text: both are made by the same code.
 *
 * Buffer: the caller owns buf. At most capacity bytes are written, always
 * NUL-terminated when capacity > 0; a shorter buffer receives a truncated
 * prefix and VPMM_OK (truncation is not an error: compare *needed with
 * capacity). *needed (may be NULL) receives the full length + 1, so
 * vpmm_pool_layout(pool, NULL, 0, &n) sizes the buffer. The layout can change
 * between two calls when other threads use the pool: size the second buffer
 * with some slack, or call again while *needed > capacity.
 * Errors: INVALID_ARGUMENT (null or destroyed pool, NULL buf with capacity >
 * 0), OUT_OF_MEMORY. Thread safe: a consistent snapshot under the pool's lock;
 * never blocks on the device. */
VPMM_API vpmm_status vpmm_pool_layout(vpmm_pool* pool, char* buf, size_t capacity,
                                      size_t* needed);

/* Verify every invariant of the pool (regions partition the reserved VA, each
 * mapped page belongs to exactly one live/free/zombie range, handle maps match,
 * stats equal the sums of the maps, size indexes agree). VPMM_OK when they hold.
 * Errors: INTERNAL, with a description of the first violation. O(regions +
 * handles), under the pool's lock. Thread safe. */
VPMM_API vpmm_status vpmm_pool_check(vpmm_pool* pool);

/* One line of text about the driver backend `backend` (VPMM_BACKEND_*) would
 * use on this machine, for diagnostics (`vpmm info`): for HIP, the runtime
 * file loaded, its version, the ROCm paths it takes (chunked hipMemCreate and
 * the chunk size, the ROCm 7.2 VA-recycling workaround, the page floor) and
 * what hipGetDeviceCount says; the environment variables that change them are
 * read as vpmm_config_init reads them. Nothing is created: a missing driver
 * is described, not an error. Writes at most `capacity` bytes including the
 * NUL into buf (truncating); *length (may be NULL) receives the full length.
 * Errors: INVALID_ARGUMENT (null buf with capacity > 0, a value that is no
 * VPMM_BACKEND_* or AUTO), UNSUPPORTED (the backend is not built in, or has
 * nothing to describe: host and CUDA today). Thread safe. */
VPMM_API vpmm_status vpmm_backend_info(int32_t backend, char* buf, size_t capacity, size_t* length);

/* The option table and struct facts, for bindings and tools.
 *
 * Every option the library reads, in one table: its vpmm_config field (if
 * any), its VPMM_* environment variable (if any), its default and a line of
 * help. vpmm_config_init, `vpmm info` and the docs all come from this table,
 * so a binding reads names, defaults and field offsets here instead of
 * copying them. Entries are in a fixed order: the index of an entry with an
 * environment variable, plus 1, is what vpmm_config.config_error reports.
 * The table only grows (new entries are appended). */

/* vpmm_option_info.kind: how the value is written and stored. */
/* Signed constants in the style of the status codes (see there). */
#ifdef __cplusplus
static const int32_t VPMM_OPTION_BACKEND = 1;
static const int32_t VPMM_OPTION_INT32 = 2;
static const int32_t VPMM_OPTION_SIZE = 3;
static const int32_t VPMM_OPTION_COUNT = 4;
static const int32_t VPMM_OPTION_HANDLE_SIZE = 5;
static const int32_t VPMM_OPTION_LIMIT = 6;
static const int32_t VPMM_OPTION_FRACTION = 7;
static const int32_t VPMM_OPTION_LOG_LEVEL = 8;
static const int32_t VPMM_OPTION_DEVICE_LIST = 9;
static const int32_t VPMM_OPTION_TEXT = 10;
static const int32_t VPMM_OPTION_SIGNED_ = -1;
#else
enum {
  VPMM_OPTION_BACKEND = 1, /* int32_t VPMM_BACKEND_*; text auto|cuda|hip|host */
  VPMM_OPTION_INT32 = 2, /* int32_t; decimal or 0x-hex */
  VPMM_OPTION_SIZE = 3, /* uint64_t bytes; decimal or 0x-hex, K/M/G/T (powers of 1024) */
  VPMM_OPTION_COUNT = 4, /* uint64_t count; written as a size without suffix */
  VPMM_OPTION_HANDLE_SIZE = 5, /* uint64_t; a size, "Np" (N pages) or "unlimited" */
  VPMM_OPTION_LIMIT = 6, /* uint64_t bytes as a size, or "N%" of device memory, which
                          * sets memory_limit_fraction instead */
  VPMM_OPTION_FRACTION = 7, /* double; the field's comment gives its range; an environment
                             * variable where env names one: a decimal or a percentage */
  VPMM_OPTION_LOG_LEVEL = 8, /* process-wide, no config field: off|error|warn|info|debug */
  VPMM_OPTION_DEVICE_LIST = 9, /* uint64_t bit mask of devices; text "1,3" (ordinals 0-63) or "none" */
  VPMM_OPTION_TEXT = 10, /* text read as its help says (a path, a tag, a switch, a name). Most
                          * are process-wide, with no config field, never judged by
                          * vpmm_config_init: the part that reads it reports a malformed value.
                          * One with a field (field_size > 0: ledger) is a const char* field,
                          * judged by vpmm_config_init like any pool option */
  VPMM_OPTION_SIGNED_ = -1 /* never used: makes the enum's type int (see the status codes) */
};
#endif

typedef struct vpmm_option_info {
  uint32_t struct_size;     /* = sizeof(vpmm_option_info), set by the caller */
  int32_t kind;             /* VPMM_OPTION_* */
  const char* name;         /* vpmm_config field name, e.g. "page_size"; for an option
                             * without a field its own name, e.g. "log" */
  const char* env;          /* "VPMM_PAGE_SIZE", or NULL when only the field sets it */
  const char* default_text; /* the default in words, e.g. "0 (backend granularity, 2 MiB)" */
  const char* help;         /* one line */
  uint32_t field_offset;    /* offsetof(vpmm_config, field); UINT32_MAX without a field */
  uint32_t field_size;      /* sizeof the field; 0 without a field */
} vpmm_option_info;

/* Number of entries in the option table. Thread safe. */
VPMM_API uint32_t vpmm_option_count(void);

/* Describe entry i (0 <= i < vpmm_option_count()). out->struct_size must be
 * set; at most that many bytes are written. Strings are static (never freed).
 * Errors: INVALID_ARGUMENT (null out, struct_size too small, i out of range).
 * Thread safe. */
VPMM_API vpmm_status vpmm_option_get(uint32_t i, vpmm_option_info* out);

/* Find an entry by field name ("page_size") or variable ("VPMM_PAGE_SIZE");
 * *index (may be NULL) receives its index. Errors: INVALID_ARGUMENT (null
 * name or out, bad struct_size, no such option). Thread safe. */
VPMM_API vpmm_status vpmm_option_find(const char* name, vpmm_option_info* out, uint32_t* index);

/* Parse `text` as the option `name` (field name "placement" or variable
 * "VPMM_PLACEMENT") reads it from the environment, and store the value in
 * that field of *config: the library's own parser, so a program or binding
 * that takes options as text ("1%", "64M", "views") accepts and refuses
 * exactly what the VPMM_* variables do. Only that field's bytes are written,
 * and only if config->struct_size (set it: vpmm_config_init) reaches them.
 * Errors: INVALID_ARGUMENT (a NULL argument, no such option, an option
 * without a field, a struct_size too short, or a value the option refuses:
 * the message says why and what it accepts). Thread safe; *config is the
 * caller's to guard. */
VPMM_API vpmm_status vpmm_option_parse(const char* name, const char* text, vpmm_config* config);

/* The name of placement chain `placement` (VPMM_PLACEMENT_*: "default",
 * "exact", "views", "pending"), as VPMM_PLACEMENT and vpmm_option_parse take
 * it; NULL for a value that names no chain. The string is static. Thread
 * safe. */
VPMM_API const char* vpmm_placement_name(int32_t placement);

/* vpmm_field_info.kind: the C type of a public struct's field. */
/* Signed constants in the style of the status codes (see there). */
#ifdef __cplusplus
static const int32_t VPMM_FIELD_U32 = 1;
static const int32_t VPMM_FIELD_I32 = 2;
static const int32_t VPMM_FIELD_U64 = 3;
static const int32_t VPMM_FIELD_F64 = 4;
static const int32_t VPMM_FIELD_PTR = 5;
static const int32_t VPMM_FIELD_SIGNED_ = -1;
#else
enum {
  VPMM_FIELD_U32 = 1,
  VPMM_FIELD_I32 = 2,
  VPMM_FIELD_U64 = 3,
  VPMM_FIELD_F64 = 4,
  VPMM_FIELD_PTR = 5, /* a pointer (void*, const char*, a handle) */
  VPMM_FIELD_SIGNED_ = -1 /* never used: makes the enum's type int (see the status codes) */
};
#endif

typedef struct vpmm_field_info {
  uint32_t struct_size; /* = sizeof(vpmm_field_info), set by the caller */
  int32_t kind;         /* VPMM_FIELD_* */
  const char* name;     /* the field's name in this header */
  uint32_t offset;      /* offsetof in the library's build */
  uint32_t size;        /* sizeof the field */
} vpmm_field_info;

/* The layout of a public struct of this header as the library was built:
 * name is the struct's name ("vpmm_config", "vpmm_stats", "vpmm_alloc_attrs",
 * "vpmm_tag_stats", "vpmm_region_info" (also accepted as "vpmm_region", its name
 * in earlier headers), "vpmm_option_info", "vpmm_field_info", "vpmm_api",
 * "vpmm_ipc_entry", "vpmm_ipc_stats").
 * *size (may be NULL) receives its sizeof, *fields (may be NULL) its number of
 * fields. Errors: INVALID_ARGUMENT (null name, unknown struct). Thread safe. */
VPMM_API vpmm_status vpmm_struct_layout(const char* name, uint32_t* size, uint32_t* fields);

/* Field i of struct `name`, in declaration order. out->struct_size must be
 * set. Errors: INVALID_ARGUMENT (null name/out, unknown struct, i out of
 * range, bad struct_size). Thread safe. */
VPMM_API vpmm_status vpmm_struct_field(const char* name, uint32_t i, vpmm_field_info* out);

/* ------------------------------------------------------------------------ */
/* Sharing memory with other processes                                      */
/* ------------------------------------------------------------------------ */
/* A process exports live allocations of an exportable pool (vpmm_config.
 * exportable); another process on the same machine imports them into a pool
 * of the same device and gets device pointers to the same bytes, with
 * read/write access for its device. docs/ipc.md has the design, the
 * diagram of who holds which handle, and measurements.
 *
 * What travels is a descriptor (a plain byte string: copy, pickle or send it
 * anywhere) plus one POSIX file descriptor per physical handle and two for
 * small status and counter pages. File descriptors cannot be copied as bytes: they go
 * over a Unix-domain socket (vpmm_export_send / vpmm_ipc_recv, SCM_RIGHTS),
 * or the importer takes them from the exporter with pidfd_getfd (the
 * descriptor names the exporter's pid and its descriptor numbers; Linux
 * 5.6+, and it needs permission to ptrace the exporter, often refused in
 * containers).
 *
 * What is exported is whole physical handles: a handle maps whole, so an
 * allocation that shares its first or last handle with neighbours
 * (large_rounding below the page, handles larger than a page) exports those
 * handles whole, and the importer must only touch the allocation's own bytes
 * (vpmm_import_entry gives their address and size).
 *
 * The status page tells importers, without a round trip, whether the
 * export still describes the exporter's memory (vpmm_import_state):
 *   ACTIVE   yes: both processes read and write the same bytes.
 *   PAUSED   the exporter paused an exported allocation and released its
 *            memory. The importer's mapping keeps the old physical memory
 *            alive (the driver frees it only when every process has unmapped
 *            it: vpmm_ipc_stats.held_by_importers_bytes on the exporter); it
 *            holds the bytes as they were at the pause, and writes to it reach
 *            nobody. After the exporter resumes, its allocation has new memory
 *            at the same address: close the import and import a new export.
 *   FREED    the exporter freed an exported allocation: its memory went back
 *            to the exporter's pool, which may hand it to other allocations.
 *            Stop touching the import and close it.
 *   CLOSED   the exporter closed the export or destroyed its pool.
 *   EXITED   the exporting process exited without closing it. The mapping
 *            stays valid (and holds the memory) until the importer closes it.
 * Every state but ACTIVE is final for that export.
 *
 * An importer can never crash, stall or deceive the exporter, whatever it
 * does with the descriptors it receives (docs/ipc.md, "What an importer
 * cannot do"): they are sealed against resizing, the status page against
 * writes, no exporter call waits for an importer, and the exporter reports
 * the state it published. What an importer can do is what shared memory
 * allows: read and write the exported bytes while it maps them. */
#ifdef __cplusplus
static const int32_t VPMM_EXPORT_ACTIVE = 1;
static const int32_t VPMM_EXPORT_PAUSED = 2;
static const int32_t VPMM_EXPORT_FREED = 3;
static const int32_t VPMM_EXPORT_CLOSED = 4;
static const int32_t VPMM_EXPORT_EXITED = 5;
static const int32_t VPMM_EXPORT_SIGNED_ = -1;
#else
enum {
  VPMM_EXPORT_ACTIVE = 1,
  VPMM_EXPORT_PAUSED = 2,
  VPMM_EXPORT_FREED = 3,
  VPMM_EXPORT_CLOSED = 4,
  VPMM_EXPORT_EXITED = 5,
  VPMM_EXPORT_SIGNED_ = -1 /* never reported: makes the enum's type int */
};
#endif

/* The exporter's handle on an export: made by vpmm_pool_export(_tag), owned
 * by the caller until vpmm_export_close (or the pool's destroy). Opaque. */
typedef struct vpmm_export vpmm_export;
/* The importer's: made by vpmm_pool_import, owned by the caller until
 * vpmm_import_close (or the pool's destroy). Opaque. */
typedef struct vpmm_import vpmm_import;

/* One allocation of an export (a small-object slab of a tag export counts as
 * one entry of its whole pages). */
typedef struct vpmm_ipc_entry {
  uint32_t struct_size;  /* = sizeof(vpmm_ipc_entry), set by the caller */
  uint32_t reserved0;
  uint64_t exporter_ptr; /* the allocation's address in the exporting process */
  uint64_t size;         /* its bytes (as asked for; a slab: its pages) */
  void* ptr;             /* importer: the same bytes in this process; exporter: exporter_ptr */
  uint64_t n_entries;    /* how many entries the export has */
} vpmm_ipc_entry;

/* Export the live allocation containing ptr (interior pointers allowed) of
 * an exportable pool. The export holds a file descriptor per covering
 * handle and a status page. Freeing or pausing the allocation turns it
 * FREED or PAUSED and closes the handle descriptors (the exporter keeps no
 * reference to the memory); closing it, or destroying the pool, turns it
 * CLOSED. An allocation may be exported several times; each export is
 * imported on its own. *out is the caller's until vpmm_export_close.
 * Errors: INVALID_ARGUMENT (null ptr or out), UNKNOWN_POINTER (ptr is in no
 * live allocation of this pool), WRONG_STATE (the allocation is paused),
 * UNSUPPORTED (the pool is not exportable), OUT_OF_MEMORY (no file
 * descriptor or memory for the status page), BACKEND. Thread safe. */
VPMM_API vpmm_status vpmm_pool_export(vpmm_pool* pool, const void* ptr, vpmm_export** out);

/* Export every active allocation with `tag` (NULL = every tagged one) as one
 * export: the weights of a model in one descriptor. Small-object slabs of
 * the tag are shared whole (their blocks may come and go; the slab's pages
 * going back to the pool, when its last block is freed or a trim gives the
 * cached empty slab back, turns the export FREED). Paused allocations of the
 * tag are not included. Errors: INVALID_ARGUMENT (null out, a tag never used
 * by this pool, tag too long), WRONG_STATE (nothing with the tag is
 * active), and those of vpmm_pool_export. Thread safe. */
VPMM_API vpmm_status vpmm_pool_export_tag(vpmm_pool* pool, const char* tag, vpmm_export** out);

/* Export the live allocations containing ptrs[0..n) (interior pointers
 * allowed) as one export: one status page, one descriptor and one round
 * trip for all of them, the handles of each shared once (what a weight sync
 * of many tensors wants: vpmm.torch.share_many). Entries: one per distinct
 * allocation, in address order, however many pointers fall in it. Freeing
 * or pausing any of them ends the export (FREED, PAUSED), as for
 * vpmm_pool_export. The pointers may name allocations and small blocks of
 * any tag. Errors: INVALID_ARGUMENT (null pool or out, null ptrs, n 0 or
 * above 2^24, a NULL pointer in ptrs: the message names its index), and
 * those of vpmm_pool_export naming the pointer's index. Thread safe. */
VPMM_API vpmm_status vpmm_pool_export_many(vpmm_pool* pool, const void* const* ptrs, size_t n, vpmm_export** out);

/* Do now, for every physical handle of tag's active allocations (NULL:
 * every tagged one), what exporting it would pay the driver for, so that a
 * later vpmm_pool_export / _export_many / _export_tag of them costs a
 * descriptor duplicate per handle: CUDA and HIP export each handle once
 * (cuMemExportToShareableHandle, hundreds of microseconds a handle) and keep
 * the descriptor until the handle is released; the host backend has nothing
 * to prepare. A trainer calls it after a resume, on a thread of its own
 * while it trains, so that the weight sync that follows does not wait for
 * the driver: the driver calls run without the pool's lock (mallocs, frees
 * and pauses on other threads go on; a handle paused meanwhile is skipped).
 * Prepared descriptors are no export: nothing is shared until one is made.
 * *n_handles (may be NULL): the handles prepared. Errors: INVALID_ARGUMENT
 * (null pool, a tag never used, too long), WRONG_STATE (nothing with the tag
 * is active), UNSUPPORTED (the pool is not exportable), OUT_OF_MEMORY (file
 * descriptors), BACKEND (the first driver failure; the other handles are
 * still prepared). Thread safe. */
VPMM_API vpmm_status vpmm_pool_prepare_export(vpmm_pool* pool, const char* tag, uint64_t* n_handles);

/* Entry `index` of an export, in address order (out->struct_size must be
 * set; at most that many bytes are written; ptr = exporter_ptr).
 * Errors: INVALID_ARGUMENT (null or closed export, null out, bad
 * struct_size, index >= the number of entries). Thread safe. */
VPMM_API vpmm_status vpmm_export_entry(const vpmm_export* ex, size_t index, vpmm_ipc_entry* out);

/* The export's shareable form: the descriptor (bytes, no pointers) and the
 * file descriptors that travel with it, in order. The file descriptors stay
 * owned by the export (never close them); they are valid while its state is
 * ACTIVE. With buf NULL and capacity 0, and fds NULL and fd_capacity 0, only
 * *size and *n_fds are written (the sizes). Errors: INVALID_ARGUMENT (null
 * or closed export, null size or n_fds, NULL buf with capacity (fds with
 * fd_capacity), capacity or fd_capacity too small), WRONG_STATE (the export
 * is not ACTIVE: its handle descriptors are closed). Thread safe, but a
 * pause or free on another thread may close the descriptors right after the
 * call: vpmm_export_send sends under the export's lock instead. */
VPMM_API vpmm_status vpmm_export_descriptor(const vpmm_export* ex, void* buf, size_t capacity, size_t* size,
                                            int* fds, size_t fd_capacity, size_t* n_fds);

/* Send the export's descriptor and file descriptors over a connected
 * Unix-domain socket (SOCK_STREAM or SOCK_SEQPACKET) as vpmm_ipc_send does.
 * The file descriptors sent stay open until the call returns, even if the
 * exported memory is paused or freed meanwhile: what was sent was the
 * memory's, and an importer receiving it after the pause or free sees the
 * new state. Blocks while the socket's buffer is full, holding nothing any
 * other call waits for: a peer that never reads stalls this call alone
 * (give the socket SO_SNDTIMEO, or make it non-blocking, to bound it).
 * Errors: INVALID_ARGUMENT (null or closed export, not a Unix-domain
 * socket), WRONG_STATE (the export is not ACTIVE), BACKEND (sendmsg failed:
 * the peer closed, the timeout passed; the message names errno). Thread
 * safe. */
VPMM_API vpmm_status vpmm_export_send(const vpmm_export* ex, int socket);

/* The state this process published to importers (VPMM_EXPORT_*; CLOSED
 * once closed by the pool's destroy): kept in its own memory, so nothing an
 * importer does changes it. In *importers (may be NULL) how many processes
 * hold an import of it now (counted from the locks their imports hold on the
 * status page: an importer that exited without closing no longer counts),
 * and in *imports (may be NULL) how many imports of it were made so far, as
 * importers report them (a hostile importer can misreport both; the library
 * decides nothing from them). A sender that keeps the memory alive for its
 * receivers lets go once imports > 0 and importers is 0 again. Never waits
 * for an importer. Errors: INVALID_ARGUMENT (null or closed export, null
 * state). Thread safe. */
VPMM_API vpmm_status vpmm_export_state(const vpmm_export* ex, int32_t* state, uint32_t* importers,
                                       uint64_t* imports);

/* Close an export: importers see CLOSED; their mappings stay valid and keep
 * the memory alive until they close them (the exporter's allocation is
 * unaffected). The handle is dead afterwards. Errors: INVALID_ARGUMENT (a
 * NULL or closed export, an export of another pool; an export whose pool was
 * destroyed is closed, and freed, by this call without error). Thread safe,
 * but not with other calls on the same export. */
VPMM_API vpmm_status vpmm_export_close(vpmm_pool* pool, vpmm_export* ex);

/* Map an export into this process: into VA reserved for the import (not the
 * pool's chunks: imported memory is no allocation of the pool and counts in
 * no limit or reservation), with read/write access for the pool's device.
 * desc/size: a descriptor (vpmm_export_descriptor, vpmm_ipc_recv); fds: its
 * n_fds file descriptors in order, which stay the caller's (close them after
 * the call, whatever it returns). fds NULL with n_fds 0 takes them from the
 * exporting process with pidfd_getfd. The pool may be any pool of the
 * device the export is on (exportable or not). An export is imported at
 * most once per pool. Handles an import of the pool already maps (a new
 * export of the same memory) are not mapped again: the import uses that
 * mapping (the same addresses; it stays until the last import using it
 * closes). *out is the caller's until vpmm_import_close.
 * Errors: INVALID_ARGUMENT (null desc or out, bytes that are not a
 * descriptor of this version, n_fds differing from the descriptor's count,
 * file descriptors that are not its pages and handles, or that could be
 * resized under the mapping (not sealed), a descriptor of another backend
 * or device: import into a pool of the device it was exported from),
 * WRONG_STATE (the export is not ACTIVE, or is already imported into this
 * pool), UNSUPPORTED (no fds, and pidfd_getfd is missing or refused: the
 * message says which; send the descriptor over a socket instead),
 * OUT_OF_MEMORY (VA, file descriptors), BACKEND. On error nothing stays
 * mapped or open. Thread safe. */
VPMM_API vpmm_status vpmm_pool_import(vpmm_pool* pool, const void* desc, size_t size, const int* fds,
                                      size_t n_fds, vpmm_import** out);

/* Entry `index` of an import, in the exporter's address order: ptr is where
 * the entry's bytes are in this process (out->struct_size must be set; at
 * most that many bytes are written). Errors: INVALID_ARGUMENT (null or
 * closed import, null out, bad struct_size, index >= the number of
 * entries). Thread safe. */
VPMM_API vpmm_status vpmm_import_entry(const vpmm_import* imp, size_t index, vpmm_ipc_entry* out);

/* The export's state as the exporter published it (VPMM_EXPORT_*), read
 * from the status page both processes map: no round trip to the exporter (a
 * load, plus one fcntl while the word says ACTIVE, to tell a live exporter
 * from one that exited). Errors: INVALID_ARGUMENT (null or closed import, an
 * import whose pool was destroyed, null state). Thread safe. */
VPMM_API vpmm_status vpmm_import_state(const vpmm_import* imp, int32_t* state);

/* Unmap and release an import. Work queued on the GPU that reads or writes
 * it must have completed (synchronize first): the driver does not wait. The
 * handle is dead afterwards. Errors: INVALID_ARGUMENT (a NULL or closed
 * import, an import of another pool; one whose pool was destroyed, which
 * unmapped it, is freed by this call without error), BACKEND. Thread safe,
 * but not with other calls on the same import. */
VPMM_API vpmm_status vpmm_import_close(vpmm_pool* pool, vpmm_import* imp);

/* Send a descriptor and its file descriptors over a connected Unix-domain
 * socket (SOCK_STREAM or SOCK_SEQPACKET), SCM_RIGHTS, in as many messages as
 * the kernel's limit of descriptors per message needs. The caller keeps its
 * descriptors. For relays; an exporter uses vpmm_export_send.
 * Errors: INVALID_ARGUMENT (NULL desc with size, NULL fds with n_fds, not a
 * Unix-domain socket), BACKEND (sendmsg failed). Thread safe (one message at
 * a time per socket is the caller's to ensure). */
VPMM_API vpmm_status vpmm_ipc_send(int socket, const void* desc, size_t size, const int* fds, size_t n_fds);

/* Receive what vpmm_ipc_send or vpmm_export_send sent. With buf NULL and
 * capacity 0 (and fds NULL, fd_capacity 0) it waits for a message and only
 * writes its *size and *n_fds, consuming nothing: size the buffers, then
 * call again. The received file descriptors (close-on-exec) are the
 * caller's: close them after vpmm_pool_import. Errors: INVALID_ARGUMENT
 * (null size or n_fds, NULL buf with capacity (fds with fd_capacity),
 * buffers too small: nothing is consumed, not a Unix-domain socket, a
 * message that is not a descriptor), OUT_OF_MEMORY (the process's file
 * descriptor limit truncated the message's descriptors; what arrived is
 * closed), BACKEND (recvmsg failed, or the peer closed the socket). Thread
 * safe (one receiver per socket is the caller's to ensure). */
VPMM_API vpmm_status vpmm_ipc_recv(int socket, void* buf, size_t capacity, size_t* size, int* fds,
                                   size_t fd_capacity, size_t* n_fds);

typedef struct vpmm_ipc_stats {
  uint32_t struct_size; /* = sizeof(vpmm_ipc_stats), set by the caller */
  uint32_t reserved0;
  uint64_t exports;       /* open exports of this pool, in any state */
  uint64_t exports_active; /* of them, ACTIVE */
  uint64_t exported_bytes; /* bytes of the handles of ACTIVE exports */
  uint64_t importers;     /* processes holding an import of an open export now */
  uint64_t held_by_importers_bytes; /* bytes of PAUSED exports that importers still map: device
                                     * memory the pool released, outside mapped_bytes, that comes
                                     * back only when those importers close */
  uint64_t imports;       /* open imports in this pool */
  uint64_t imported_bytes; /* bytes they map */
  uint64_t n_exports;     /* exports made over the pool's life */
  uint64_t n_imports;     /* imports made over the pool's life */
} vpmm_ipc_stats;

/* Snapshot of the pool's exports and imports (stats->struct_size must be
 * set; at most that many bytes are written). Errors: INVALID_ARGUMENT (null
 * stats, struct_size below 16 or over 65536). Thread safe. */
VPMM_API vpmm_status vpmm_pool_ipc_stats(vpmm_pool* pool, vpmm_ipc_stats* stats);

/* Host backend streams (tests, `vpmm replay --gpu-lag`): see vpmm_host_streams.h. */

#ifdef __cplusplus
}
#endif

/* The rest of the public header, in files of its own (each includes this
 * one; a program names only vpmm.h): the ledger shared by the pools of
 * several processes, vpmm_get_api's function table for run-time loading,
 * and the framework hooks. */
#include "vpmm_ledger.h"
#include "vpmm_api_table.h"
#include "vpmm_hooks.h"

#endif /* VPMM_H */
