/*
 * libvpmm: a GPU virtual-memory pool allocator.
 *
 * The only public header. Plain C99 with fixed-width integers and opaque
 * handles, so Rust (bindgen), Python (ctypes), Go (cgo) and dlopen users can
 * consume it unchanged. Every struct that may grow starts with its own size
 * (`struct_size`); callers set it to sizeof() of the struct they compiled
 * against, and the library only reads/writes that many bytes.
 *
 * Conventions that hold for every function below unless its comment says
 * otherwise:
 *  - Return value is a vpmm_status. VPMM_OK (0) is success; errors are
 *    positive and pinned forever. On error a human sentence naming the call
 *    and the offending value is available from vpmm_last_error() on the same
 *    thread, and every out-parameter is left untouched.
 *  - A failed call leaves the pool exactly as it was before the call.
 *  - No C++ exception ever crosses this ABI.
 *  - Thread safety: all vpmm_pool_* functions may be called concurrently on
 *    the same pool from any thread (the pool serialises internally), except
 *    vpmm_pool_destroy, which must not race any other call on that pool.
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
/* Versions                                                                  */
/* ------------------------------------------------------------------------ */
#define VPMM_VERSION_MAJOR 0
#define VPMM_VERSION_MINOR 1
#define VPMM_VERSION_PATCH 0
#define VPMM_VERSION_NUMBER \
  (VPMM_VERSION_MAJOR * 10000 + VPMM_VERSION_MINOR * 100 + VPMM_VERSION_PATCH)
/* Bumped only when an existing signature or struct layout changes
 * incompatibly (never, so far); also the SONAME suffix. */
#define VPMM_ABI_VERSION 1

/* "MAJOR.MINOR.PATCH" of the loaded library. Static string; thread safe. */
VPMM_API const char* vpmm_version(void);
/* VPMM_ABI_VERSION of the loaded library. Thread safe. */
VPMM_API int32_t vpmm_abi_version(void);

/* ------------------------------------------------------------------------ */
/* Status codes (pinned forever)                                             */
/* ------------------------------------------------------------------------ */
typedef int32_t vpmm_status;

#define VPMM_OK 0
/* 1..99: errors */
#define VPMM_ERR_INVALID_ARGUMENT 1 /* null pointer, zero/overflowing size, bad enum, bad config */
#define VPMM_ERR_OUT_OF_MEMORY 2    /* backend refused physical memory, VA, or host capacity */
#define VPMM_ERR_UNKNOWN_POINTER 3  /* free/lookup of a pointer this pool did not return */
#define VPMM_ERR_WRONG_STATE 4      /* operation not valid in the object's current state */
#define VPMM_ERR_UNSUPPORTED 5      /* backend not built/not available, or lacks a capability */
#define VPMM_ERR_BACKEND 6          /* the driver (or host OS) failed for a reason other than OOM */
#define VPMM_ERR_INTERNAL 7         /* an invariant of the pool does not hold (a bug: please report) */
/* 100..: informational, not errors */
#define VPMM_NO_OP 100 /* nothing was in the state the call changes (pause of paused, resume of active) */

/* Readable name of a status, e.g. "VPMM_ERR_OUT_OF_MEMORY". Never NULL (unknown
 * codes give "VPMM_ERR_UNKNOWN"). Static string; thread safe. */
VPMM_API const char* vpmm_status_string(vpmm_status status);

/* The message of the last failed vpmm_* call on the calling thread, e.g.
 * "vpmm_pool_malloc: size 0 is not allowed". Never NULL: "" when no call on
 * this thread has failed yet. The string is thread-local and stays valid until
 * the next vpmm_* call on the same thread; copy it if you need it longer.
 * Never allocates. */
VPMM_API const char* vpmm_last_error(void);

/* ------------------------------------------------------------------------ */
/* Streams                                                                   */
/* ------------------------------------------------------------------------ */
/* A cudaStream_t / CUstream (CUDA backend), hipStream_t (HIP backend) or a
 * stream from vpmm_host_stream_create (host backend). NULL is the backend's
 * default stream. The pool never takes ownership of a stream. */
typedef void* vpmm_stream;

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */
/* ------------------------------------------------------------------------ */
#define VPMM_BACKEND_AUTO 0 /* CUDA when a GPU is usable, else host */
#define VPMM_BACKEND_CUDA 1
#define VPMM_BACKEND_HIP 2
#define VPMM_BACKEND_HOST 3

/* vpmm_config.max_handle_size: one physical handle per growth, however large. */
#define VPMM_HANDLE_SIZE_UNLIMITED UINT64_MAX

typedef struct vpmm_config {
  uint32_t struct_size;   /* = sizeof(vpmm_config) */
  int32_t backend;        /* VPMM_BACKEND_*; env VPMM_BACKEND=auto|cuda|hip|host */
  int32_t device;         /* device ordinal (ignored by the host backend); env VPMM_DEVICE */
  int32_t config_error;   /* set by vpmm_config_init: index+1 of a malformed VPMM_* variable
                           * (reported by vpmm_pool_create); 0 = none. Leave as is. */
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
} vpmm_config;

/* Fill *config with defaults, then apply the VPMM_* environment variables named
 * above. Sizes accept a decimal or 0x-hex integer with an optional K/M/G/T
 * suffix (powers of 1024). A malformed variable is not silently ignored: it is
 * recorded in config->config_error and vpmm_pool_create then fails with
 * VPMM_ERR_INVALID_ARGUMENT naming the variable and its value.
 * NULL config is ignored. Thread safe (reads the environment). */
VPMM_API void vpmm_config_init(vpmm_config* config);

/* ------------------------------------------------------------------------ */
/* Pool lifetime                                                             */
/* ------------------------------------------------------------------------ */
typedef struct vpmm_pool vpmm_pool;

/* Create a pool. config may be NULL (= vpmm_config_init defaults). The config is
 * copied; the caller keeps ownership of it. On success *out owns the pool, to be
 * released with vpmm_pool_destroy.
 * Errors: INVALID_ARGUMENT (null out, struct_size too small, bad field, malformed
 * environment variable), UNSUPPORTED (backend not built or no device),
 * OUT_OF_MEMORY (initial_pages could not be created), BACKEND. */
VPMM_API vpmm_status vpmm_pool_create(const vpmm_config* config, vpmm_pool** out);

/* Destroy a pool: waits for the events of every free region and zombie (work
 * still queued on the GPU that touches pool memory completes first), then
 * unmaps and releases all physical memory and VA. Live allocations are
 * released too: their pointers become invalid. NULL is a no-op (VPMM_OK).
 * Not thread safe with respect to other calls on the same pool. */
VPMM_API vpmm_status vpmm_pool_destroy(vpmm_pool* pool);

/* ------------------------------------------------------------------------ */
/* Allocation                                                                */
/* ------------------------------------------------------------------------ */
/* Allocate size bytes usable on `stream` in stream order. Requests above
 * config.small_size are rounded up to whole pages (page aligned); smaller
 * ones are carved from shared pages in size classes (aligned to 256 bytes).
 * Never blocks the CPU on the GPU: reuse across streams either waits for an
 * already completed event or inserts a GPU-side wait on `stream`.
 * Errors: INVALID_ARGUMENT (null pool/out, size 0, size that overflows when
 * rounded), OUT_OF_MEMORY (backend refused memory; pool unchanged), BACKEND.
 * Thread safe. */
VPMM_API vpmm_status vpmm_pool_malloc(vpmm_pool* pool, uint64_t size, vpmm_stream stream,
                                      void** out);

/* Free a pointer returned by vpmm_pool_malloc of this pool, in the order of
 * `stream`: work queued on `stream` before this call may still use the memory;
 * the pool only reuses it on another stream after that work completes.
 * NULL ptr is a no-op (VPMM_OK).
 * Errors: INVALID_ARGUMENT (null pool), UNKNOWN_POINTER (not from this pool,
 * already freed, or an interior pointer). Thread safe. */
VPMM_API vpmm_status vpmm_pool_free(vpmm_pool* pool, void* ptr, vpmm_stream stream);

/* Find the allocation that contains ptr (interior pointers allowed).
 * base and size may be NULL. Errors: INVALID_ARGUMENT, UNKNOWN_POINTER. */
VPMM_API vpmm_status vpmm_pool_lookup(vpmm_pool* pool, const void* ptr, void** base,
                                      uint64_t* size);

/* Block the calling thread until all work queued on `stream` completes.
 * Errors: INVALID_ARGUMENT, BACKEND, WRONG_STATE (a held host stream, which
 * would never complete). Thread safe. */
VPMM_API vpmm_status vpmm_pool_stream_synchronize(vpmm_pool* pool, vpmm_stream stream);

/* Create a stream of the pool's backend (a non-blocking CUstream on CUDA, a
 * host stream on the host backend), for callers without a runtime of their
 * own (bindings, the replay tool). *out is owned by the caller and released
 * with vpmm_pool_stream_destroy. Errors: INVALID_ARGUMENT, UNSUPPORTED, BACKEND. */
VPMM_API vpmm_status vpmm_pool_stream_create(vpmm_pool* pool, vpmm_stream* out);

/* Retire, then destroy, a stream made by vpmm_pool_stream_create (see
 * vpmm_pool_stream_retire). Errors: INVALID_ARGUMENT (NULL/default stream),
 * BACKEND. */
VPMM_API vpmm_status vpmm_pool_stream_destroy(vpmm_pool* pool, vpmm_stream stream);

/* Tell the pool a stream is about to be destroyed. The pool records the
 * stream's completion event lazily (a free costs no driver call), so before a
 * caller destroys a stream it freed pool memory on, it calls this: the pool
 * records the events it still needs now, while the stream exists. Afterwards
 * the stream must not be passed to the pool again. Streams that live as long
 * as the pool (the default stream, per-thread streams, framework stream
 * pools) never need it. Without it the pool notices the vanished stream when
 * recording fails and falls back to one device-wide synchronisation (correct,
 * but it blocks the CPU once). Errors: INVALID_ARGUMENT, BACKEND. Thread safe. */
VPMM_API vpmm_status vpmm_pool_stream_retire(vpmm_pool* pool, vpmm_stream stream);

/* ------------------------------------------------------------------------ */
/* Tags, pause and resume                                                    */
/* ------------------------------------------------------------------------ */
/* Flags of an allocation. */
#define VPMM_ALLOC_HOST_BACKUP 1u /* pause copies the bytes to pinned host memory, resume restores them */

typedef struct vpmm_reservation vpmm_reservation;

typedef struct vpmm_alloc_attrs {
  uint32_t struct_size; /* = sizeof(vpmm_alloc_attrs) */
  uint32_t flags;       /* VPMM_ALLOC_* */
  const char* tag;      /* NULL or "" = untagged (not pausable); copied, at most 63 bytes */
  vpmm_reservation* reservation; /* charge the allocation to this reservation (NULL = none) */
} vpmm_alloc_attrs;

/* vpmm_pool_malloc with attributes. attrs may be NULL (= the calling thread's
 * innermost vpmm_region_push scope, or untagged). A tagged allocation owns
 * whole physical handles (one handle for its shortfall when it grows the
 * pool), so pausing it releases exactly its memory; small tagged requests
 * share slabs of the same tag only. Errors: those of vpmm_pool_malloc, plus
 * INVALID_ARGUMENT for a bad struct_size, unknown flags or a tag too long. */
VPMM_API vpmm_status vpmm_pool_malloc_ex(vpmm_pool* pool, uint64_t size, vpmm_stream stream,
                                         const vpmm_alloc_attrs* attrs, void** out);

/* Thread-local allocation scope for callers that cannot pass attributes
 * (allocator hooks, Python): until the matching pop, vpmm_pool_malloc and
 * vpmm_pool_malloc_ex(attrs = NULL) on this thread use (tag, flags). Scopes
 * nest; pop restores the enclosing one. The tag is copied.
 * Errors: INVALID_ARGUMENT (tag too long, unknown flags), OUT_OF_MEMORY;
 * pop: WRONG_STATE when no scope is open. */
VPMM_API vpmm_status vpmm_region_push(const char* tag, uint32_t flags);
VPMM_API vpmm_status vpmm_region_pop(void);

/* Pause every live allocation with `tag` (NULL = every tagged allocation):
 * waits for the work queued on each allocation's stream (on the GPU when
 * there are backups), copies the bytes of VPMM_ALLOC_HOST_BACKUP allocations
 * to pinned host memory (pinned buffers are reused across pauses), and
 * unmaps and releases their physical memory. Copies and releases overlap
 * (batches of copies on one copy stream, each batch released once its copies
 * completed); the call returns when everything is released. Their addresses
 * stay reserved and are never handed to anybody else; touching them faults
 * until resume. Returns VPMM_NO_OP when nothing with that tag was active.
 * Errors: INVALID_ARGUMENT (tag never used by this pool), OUT_OF_MEMORY (no
 * host memory for a backup: nothing with that tag is paused), BACKEND (a
 * wait, copy or unmap failed). After BACKEND every allocation is either
 * paused with a complete backup or still active with its bytes intact
 * (vpmm_pool_tag_stats says how many of each); calling again pauses the rest.
 * Thread safe; blocks the calling thread (and other pool calls) while it runs. */
VPMM_API vpmm_status vpmm_pool_pause(vpmm_pool* pool, const char* tag);

/* Resume paused allocations with `tag` (NULL = all) at the same addresses:
 * new physical memory, mapped, and backups copied back (each copy queued as
 * soon as its allocation is mapped); returns once every copy completed.
 * Returns VPMM_NO_OP when nothing with that tag was paused. On OUT_OF_MEMORY
 * or BACKEND the allocations already resumed stay valid and every other one
 * stays paused with its backup intact: call again later. Errors:
 * INVALID_ARGUMENT (unknown tag), OUT_OF_MEMORY, BACKEND. Thread safe; blocks
 * while it runs. */
VPMM_API vpmm_status vpmm_pool_resume(vpmm_pool* pool, const char* tag);

/* Give free cached physical memory back to the driver (what
 * torch.cuda.empty_cache() does) until at most keep_bytes stay mapped in free
 * regions: waits for the events of the regions it releases, then unmaps and
 * releases whole handles lying in free regions (a handle shared with a live
 * allocation stays). Zombies are reaped first. Paused and live memory is
 * never touched. Errors: INVALID_ARGUMENT, BACKEND. Thread safe. */
VPMM_API vpmm_status vpmm_pool_trim(vpmm_pool* pool, uint64_t keep_bytes);

typedef struct vpmm_tag_stats {
  uint32_t struct_size; /* = sizeof(vpmm_tag_stats), set by the caller */
  uint32_t reserved0;
  uint64_t live_bytes;    /* active bytes (page-rounded; small slabs of the tag included) */
  uint64_t paused_bytes;  /* bytes whose physical memory is released */
  uint64_t backup_bytes;  /* host bytes holding backups */
  uint64_t n_live;        /* active regions */
  uint64_t n_paused;      /* paused regions */
} vpmm_tag_stats;

/* Per-tag byte counts (tag NULL = all tagged allocations together).
 * Errors: INVALID_ARGUMENT (null pool/out, bad struct_size, unknown tag). */
VPMM_API vpmm_status vpmm_pool_tag_stats(vpmm_pool* pool, const char* tag, vpmm_tag_stats* out);

/* ------------------------------------------------------------------------ */
/* Limits, reservations, watermarks and out-of-memory recovery               */
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
 * vpmm_reservation_release. BLOCK waits without a timeout.
 * Errors: INVALID_ARGUMENT (bytes 0, unknown flags, two modes), OUT_OF_MEMORY
 * (TRY/UPTO: nothing available; BLOCK: more than the whole capacity),
 * VPMM_ERR_WRONG_STATE (BLOCK: timed out, in _ex). Thread safe. */
VPMM_API vpmm_status vpmm_pool_reserve(vpmm_pool* pool, uint64_t bytes, uint32_t flags,
                                       vpmm_reservation** out);
/* vpmm_pool_reserve with a timeout for VPMM_RESERVE_BLOCK (UINT64_MAX = none). */
VPMM_API vpmm_status vpmm_pool_reserve_ex(vpmm_pool* pool, uint64_t bytes, uint32_t flags,
                                          uint64_t timeout_ns, vpmm_reservation** out);
/* Size and bytes currently charged. Either out may be NULL.
 * Errors: INVALID_ARGUMENT (null pool, unknown/released reservation). */
VPMM_API vpmm_status vpmm_reservation_info(vpmm_pool* pool, const vpmm_reservation* res,
                                           uint64_t* size, uint64_t* used);
/* Release a reservation and wake blocked reservers. Allocations still charged
 * to it are uncharged (they stay valid and count as unreserved).
 * Errors: INVALID_ARGUMENT (null pool, unknown or already released reservation). */
VPMM_API vpmm_status vpmm_reservation_release(vpmm_pool* pool, vpmm_reservation* res);

/* Change the hard limit (0 = none). A limit below the mapped bytes first trims
 * free cached memory; if that is not enough the call fails with WRONG_STATE
 * and the old limit stays. Errors: INVALID_ARGUMENT, WRONG_STATE. */
VPMM_API vpmm_status vpmm_pool_set_limit(vpmm_pool* pool, uint64_t bytes);

/* Called, without the pool lock held, when a malloc (or resume) runs out of
 * memory after the pool released what it could: `bytes` is the request. The
 * callback may free, pause or spill, and returns non-zero to ask for a retry
 * (at most 8 per call), zero to let the call fail. NULL removes it. */
typedef int (*vpmm_oom_fn)(vpmm_pool* pool, uint64_t bytes, void* user);
VPMM_API vpmm_status vpmm_pool_set_oom_callback(vpmm_pool* pool, vpmm_oom_fn fn, void* user);

/* Called, without the pool lock held, when mapped bytes cross the trigger
 * watermark upward (under_pressure = 1) or fall to the stop watermark
 * (under_pressure = 0). NULL removes it. */
typedef void (*vpmm_pressure_fn)(vpmm_pool* pool, int under_pressure, uint64_t mapped_bytes,
                                 void* user);
VPMM_API vpmm_status vpmm_pool_set_pressure_callback(vpmm_pool* pool, vpmm_pressure_fn fn,
                                                     void* user);

/* ------------------------------------------------------------------------ */
/* Observability                                                             */
/* ------------------------------------------------------------------------ */
typedef struct vpmm_stats {
  uint32_t struct_size; /* = sizeof(vpmm_stats), set by the caller */
  uint32_t reserved0;
  uint64_t mapped_bytes;       /* physical memory owned by the pool (pages x page_size) */
  uint64_t reserved_va_bytes;  /* VA chunks reserved */
  uint64_t live_bytes;         /* page-rounded bytes of live regions (small-object pages in use
                                * included; an empty cached slab counts as free) */
  uint64_t requested_bytes;    /* sum of sizes callers asked for, over live allocations */
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
  uint64_t bytes_remapped;     /* bytes moved by remapping into holes */
  /* beyond the fixed set */
  uint64_t page_size;
  uint64_t handles;            /* physical handles currently owned */
  uint64_t handles_created;
  uint64_t va_chunks;
  uint64_t largest_free_bytes; /* largest single free region */
  uint64_t small_bytes;        /* page bytes serving small allocations */
  uint64_t small_live_bytes;   /* bytes of small allocations (class rounded) */
  uint64_t n_small_malloc;
  uint64_t n_cross_stream_reuse; /* Phase 1 reuse of another stream's completed region */
  uint64_t n_stream_waits;     /* GPU-side waits inserted (Phase 2 harvest of pending regions) */
  uint64_t n_events_recorded;
  uint64_t n_zombies_reaped;
  uint64_t n_live;             /* live allocations (small ones included) */
  uint64_t paused_bytes;       /* VA of paused allocations (physical memory released) */
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
} vpmm_stats;

/* Snapshot the pool's counters into *stats (stats->struct_size must be set; at
 * most that many bytes are written). Errors: INVALID_ARGUMENT. Thread safe. */
VPMM_API vpmm_status vpmm_pool_stats(vpmm_pool* pool, vpmm_stats* stats);

#define VPMM_REGION_LIVE 1   /* [X]  handed out by malloc */
#define VPMM_REGION_FREE 2   /* [-X] mapped, reusable, carries stream + event */
#define VPMM_REGION_HOLE 3   /* [*X] reserved VA, nothing mapped */
#define VPMM_REGION_ZOMBIE 4 /* old VA of remapped pages, unmapped once its event completes */
#define VPMM_REGION_SMALL 5  /* live pages that serve small allocations */
#define VPMM_REGION_PAUSED 6 /* paused allocation: VA kept, physical memory released */

typedef struct vpmm_region {
  uint64_t va;         /* start address */
  uint64_t size;       /* bytes (page multiple) */
  int32_t kind;        /* VPMM_REGION_* */
  int32_t event_pending; /* free/zombie: 1 if its event has not completed (0 when not recorded
                          * yet); small: 1 if blocks wait for another stream's event */
  uint64_t chunk_offset; /* va minus the start of its VA chunk */
  uint32_t chunk;      /* index of the VA chunk, in reservation order */
  uint32_t handles;    /* physical handles mapped in this region (0 for holes) */
  vpmm_stream stream;  /* live: allocating stream; free: freeing stream; else NULL */
  uint64_t id;         /* free: creation order; live: allocation order */
  uint64_t requested;  /* live: bytes asked for; small pages: bytes asked for by their live
                        * blocks (0 with event_pending 0: an empty cached slab, counted as free) */
} vpmm_region;

/* Copy every region of the pool, in ascending VA order, into buf (up to
 * capacity entries). *count receives the total number of regions, which may
 * exceed capacity (call again with a larger buffer). buf may be NULL when
 * capacity is 0. Errors: INVALID_ARGUMENT. Thread safe (a consistent snapshot). */
VPMM_API vpmm_status vpmm_pool_dump(vpmm_pool* pool, vpmm_region* buf, size_t capacity,
                                    size_t* count);

/* Call fn once per region in ascending VA order on a consistent snapshot,
 * outside the pool's lock (fn may call back into the pool). A non-zero return
 * from fn stops the walk. Errors: INVALID_ARGUMENT, OUT_OF_MEMORY. */
typedef int (*vpmm_region_fn)(const vpmm_region* region, void* user);
VPMM_API vpmm_status vpmm_pool_visit(vpmm_pool* pool, vpmm_region_fn fn, void* user);

/* Human-readable dump: the stats, then every region in the seed notation
 * ([X] live, [-X] free, [*X] hole, [~X] zombie, [sX] small slab, [pX] paused; sizes in pages). Writes at most
 * capacity bytes including the NUL into buf; *needed (may be NULL) receives the
 * full length + 1. Errors: INVALID_ARGUMENT. */
VPMM_API vpmm_status vpmm_pool_dump_text(vpmm_pool* pool, char* buf, size_t capacity,
                                         size_t* needed);

/* Verify every invariant of the pool (regions partition the reserved VA, each
 * mapped page belongs to exactly one live/free/zombie range, handle maps match,
 * stats equal the sums of the maps, size indexes agree). VPMM_OK when they hold,
 * VPMM_ERR_INTERNAL with a description of the first violation otherwise.
 * O(regions + handles). Thread safe. */
VPMM_API vpmm_status vpmm_pool_check(vpmm_pool* pool);

/* The effective configuration of the pool (defaults resolved): page_size,
 * va_size, backend, ... config->struct_size must be set.
 * Errors: INVALID_ARGUMENT. */
VPMM_API vpmm_status vpmm_pool_get_config(vpmm_pool* pool, vpmm_config* config);

/* "cuda", "hip" or "host". Static string; NULL for a NULL pool. */
VPMM_API const char* vpmm_pool_backend_name(vpmm_pool* pool);

/* ------------------------------------------------------------------------ */
/* Default pools and allocator hooks                                         */
/* ------------------------------------------------------------------------ */
/* The process-wide pool of `device`, created on first use from
 * vpmm_config_init() (VPMM_* environment applies) and never destroyed, for
 * hooks that carry no user data. The pool is owned by the library.
 * Errors: INVALID_ARGUMENT (null out, device outside 0..63), those of
 * vpmm_pool_create. Thread safe. */
VPMM_API vpmm_status vpmm_default_pool(int32_t device, vpmm_pool** out);

/* PyTorch CUDAPluggableAllocator entry points over the default pools:
 *   torch.cuda.memory.CUDAPluggableAllocator("libvpmm.so", "vpmm_torch_malloc", "vpmm_torch_free")
 * malloc returns NULL on failure (PyTorch then raises OutOfMemoryError); the
 * reason is in vpmm_last_error(). Allocations made inside a
 * vpmm_region_push scope are tagged (pausable). Thread safe. */
VPMM_API void* vpmm_torch_malloc(ptrdiff_t size, int device, void* stream);
VPMM_API void vpmm_torch_free(void* ptr, ptrdiff_t size, int device, void* stream);

/* ------------------------------------------------------------------------ */
/* Host backend streams (testing and CPU-only use)                           */
/* ------------------------------------------------------------------------ */
/* Host streams are process-wide (not tied to a pool) and usable only with
 * pools on the host backend. Work on a stream runs in order on a worker
 * thread; an event recorded on a stream completes when everything queued
 * before it has run. A held stream runs nothing until released, so events
 * recorded on it stay pending: the way tests keep GPU-like work "in flight".
 * All functions are thread safe. NULL means the host default stream, which
 * can be held too but never destroyed. */

/* Create a stream; *out owns it until vpmm_host_stream_destroy.
 * Errors: INVALID_ARGUMENT (null out), OUT_OF_MEMORY. */
VPMM_API vpmm_status vpmm_host_stream_create(vpmm_stream* out);
/* Drain (runs queued work, even if held) and destroy a stream. Pools that saw
 * the stream must not be used with it afterwards.
 * Errors: INVALID_ARGUMENT (NULL or unknown stream). */
VPMM_API vpmm_status vpmm_host_stream_destroy(vpmm_stream stream);
/* Hold: nothing queued from now on runs until vpmm_host_stream_release.
 * Holds nest (counted). Errors: INVALID_ARGUMENT (unknown stream). */
VPMM_API vpmm_status vpmm_host_stream_hold(vpmm_stream stream);
/* Undo one hold. Errors: INVALID_ARGUMENT (unknown stream),
 * WRONG_STATE (not held). */
VPMM_API vpmm_status vpmm_host_stream_release(vpmm_stream stream);
/* Queue fn(user) on the stream (a host "kernel"). It runs on the stream's
 * worker thread after everything queued before it.
 * Errors: INVALID_ARGUMENT (unknown stream, null fn). */
VPMM_API vpmm_status vpmm_host_stream_launch(vpmm_stream stream, void (*fn)(void*), void* user);
/* Block until everything queued on the stream has run. Returns WRONG_STATE
 * at once instead of deadlocking when the stream is held.
 * Errors: INVALID_ARGUMENT (unknown stream), WRONG_STATE (held). */
VPMM_API vpmm_status vpmm_host_stream_synchronize(vpmm_stream stream);

/* ------------------------------------------------------------------------ */
/* Option table and struct facts (for bindings and tools)                    */
/* ------------------------------------------------------------------------ */
/* Every option the library reads, in one table: its vpmm_config field (if
 * any), its VPMM_* environment variable (if any), its default and a line of
 * help. vpmm_config_init, `vpmm info` and the docs all come from this table,
 * so a binding reads names, defaults and field offsets here instead of
 * copying them. Entries are in a fixed order: the index of an entry with an
 * environment variable, plus 1, is what vpmm_config.config_error reports.
 * The table only grows (new entries are appended). */

/* Longest tag accepted by vpmm_alloc_attrs.tag / vpmm_region_push (bytes,
 * without the NUL). */
#define VPMM_TAG_MAX_BYTES 63

/* vpmm_option_info.kind: how the value is written and stored. */
#define VPMM_OPTION_BACKEND 1     /* int32_t VPMM_BACKEND_*; text auto|cuda|hip|host */
#define VPMM_OPTION_INT32 2       /* int32_t; decimal or 0x-hex */
#define VPMM_OPTION_SIZE 3        /* uint64_t bytes; decimal or 0x-hex, K/M/G/T (powers of 1024) */
#define VPMM_OPTION_COUNT 4       /* uint64_t count; written as a size without suffix */
#define VPMM_OPTION_HANDLE_SIZE 5 /* uint64_t; a size, "Np" (N pages) or "unlimited" */
#define VPMM_OPTION_LIMIT 6       /* uint64_t bytes as a size, or "N%" of device memory, which
                                   * sets memory_limit_fraction instead */
#define VPMM_OPTION_FRACTION 7    /* double in [0, 1]; no environment variable */
#define VPMM_OPTION_LOG_LEVEL 8   /* process-wide, no config field: off|error|warn|info|debug */

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

/* vpmm_field_info.kind: the C type of a public struct's field. */
#define VPMM_FIELD_U32 1
#define VPMM_FIELD_I32 2
#define VPMM_FIELD_U64 3
#define VPMM_FIELD_F64 4
#define VPMM_FIELD_PTR 5 /* a pointer (void*, const char*, a handle) */

typedef struct vpmm_field_info {
  uint32_t struct_size; /* = sizeof(vpmm_field_info), set by the caller */
  int32_t kind;         /* VPMM_FIELD_* */
  const char* name;     /* the field's name in this header */
  uint32_t offset;      /* offsetof in the library's build */
  uint32_t size;        /* sizeof the field */
} vpmm_field_info;

/* The layout of a public struct of this header as the library was built:
 * name is the struct's name ("vpmm_config", "vpmm_stats", "vpmm_alloc_attrs",
 * "vpmm_tag_stats", "vpmm_region", "vpmm_option_info", "vpmm_field_info").
 * *size (may be NULL) receives its sizeof, *fields (may be NULL) its number of
 * fields. Errors: INVALID_ARGUMENT (null name, unknown struct). Thread safe. */
VPMM_API vpmm_status vpmm_struct_layout(const char* name, uint32_t* size, uint32_t* fields);

/* Field i of struct `name`, in declaration order. out->struct_size must be
 * set. Errors: INVALID_ARGUMENT (null name/out, unknown struct, i out of
 * range, bad struct_size). Thread safe. */
VPMM_API vpmm_status vpmm_struct_field(const char* name, uint32_t i, vpmm_field_info* out);

#ifdef __cplusplus
}
#endif
#endif /* VPMM_H */
