/* libvpmm_history.so: the allocation history of the PyTorch hooks, recorded
 * for vpmm.torch's memory snapshots (docs/python.md, "Memory history and
 * snapshots"). A library of its own, linked against libvpmm.so and using
 * only vpmm.h, so that libvpmm's ABI does not grow for what only the Python
 * package reads (through ctypes).
 *
 * vpmm.torch gives PyTorch vpmm_history_torch_malloc/_free instead of
 * vpmm_torch_malloc/_free. They call those and, while recording is on,
 * append an event to a ring of max_entries (the oldest overwritten, as
 * PyTorch's own history does); while it is off they cost one relaxed atomic
 * load. Events carry the calling thread's scope (the tag and backup store
 * vpmm.region pushed here too: vpmm.h has no way to read libvpmm's own),
 * optionally a context id from a callback (Python stacks), and the default
 * pool's mapped bytes and the bytes it remapped for the malloc (read with
 * vpmm_pool_stats before and after; under concurrent mallocs a remap may be
 * counted by the neighbour's event).
 *
 * Thread safety: every function may be called from any thread at any time.
 * Strings passed in are copied. No function reports an error through
 * vpmm_last_error: the few failures are return values. */
#ifndef VPMM_HISTORY_H
#define VPMM_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* vpmm_history_event.action */
#define VPMM_HISTORY_ALLOC 1  /* a malloc through the hook returned addr (size bytes asked for) */
#define VPMM_HISTORY_FREE 2   /* a free through the hook, of addr (size: what its malloc asked for) */
#define VPMM_HISTORY_PAUSE 3  /* vpmm_history_note: addr's physical memory was released (paused) */
#define VPMM_HISTORY_RESUME 4 /* vpmm_history_note: addr was resumed at the same address */
#define VPMM_HISTORY_OOM 5    /* a malloc through the hook failed (addr 0) */

/* One event; the layout is this header's (Python mirrors it). */
typedef struct vpmm_history_event {
  int32_t action;    /* VPMM_HISTORY_* */
  int32_t device;
  uint32_t scope;    /* vpmm_history_intern id of the scope string at the time (0: none) */
  uint32_t note;     /* intern id of a note's text (0: none) */
  uint64_t seq;      /* 1, 2, ... in recording order, across the whole recording */
  uint64_t addr;
  uint64_t size;
  uint64_t stream;   /* the stream as an integer (cudaStream_t) */
  uint64_t time_us;  /* CLOCK_REALTIME in microseconds, as PyTorch's time_us */
  uint64_t context;  /* what the context callback returned (0: none) */
  uint64_t mapped;   /* the default pool's mapped_bytes after the event (a free's: just before
                      * it, since a free keeps its memory mapped as a free region) */
  uint64_t remapped; /* bytes the default pool remapped during this malloc (ALLOC only) */
} vpmm_history_event;

/* Starts recording into a ring of max_entries events (at least 1), dropping
 * what an earlier recording left. Returns 0, or -1 for max_entries 0 or no
 * memory for the ring (nothing changes). */
int32_t vpmm_history_start(uint64_t max_entries);
/* Stops recording; the events stay readable until the next start. */
void vpmm_history_stop(void);
/* 1 while recording, else 0. */
int32_t vpmm_history_recording(void);

/* Copies the recorded events, oldest first, into buf (up to capacity; buf
 * may be NULL with capacity 0) and returns how many there are. *dropped
 * (may be NULL) receives how many older events the ring overwrote. */
uint64_t vpmm_history_read(vpmm_history_event* buf, uint64_t capacity, uint64_t* dropped);

/* The id of a string in the recorder's table (the same string, the same id;
 * ids start at 1 and live as long as the process). 0 for NULL or no memory. */
uint32_t vpmm_history_intern(const char* text);
/* Copies the string of `id` (NUL-terminated, cut to capacity) into buf and
 * returns its length, or 0 for an unknown id. buf may be NULL with
 * capacity 0 (to learn the length). */
size_t vpmm_history_string(uint32_t id, char* buf, size_t capacity);

/* The calling thread's scope: push an intern id (vpmm.region's tag and
 * store), pop it at the scope's end. Events take the innermost id. */
void vpmm_history_scope_push(uint32_t scope);
void vpmm_history_scope_pop(void);

/* A callback called once per recorded hook event, on the allocating thread,
 * outside every lock of this library and of libvpmm; its result is the
 * event's context. NULL (the default) calls nothing. */
typedef uint64_t (*vpmm_history_context_fn)(void);
void vpmm_history_set_context_fn(vpmm_history_context_fn fn);

/* Appends an event of `action` (PAUSE, RESUME) while recording; note is an
 * intern id (0: none). No effect when not recording. */
void vpmm_history_note(int32_t action, int32_t device, uint64_t addr, uint64_t size, uint64_t stream,
                       uint32_t note);

/* PyTorch CUDAPluggableAllocator entry points: vpmm_torch_malloc /
 * vpmm_torch_free of vpmm.h, recorded while recording is on. */
void* vpmm_history_torch_malloc(ptrdiff_t size, int device, void* stream);
void vpmm_history_torch_free(void* ptr, ptrdiff_t size, int device, void* stream);

#ifdef __cplusplus
}
#endif
#endif /* VPMM_HISTORY_H */
