/*
 * libvpmm: host backend streams, for tests and for `vpmm replay --gpu-lag`.
 *
 * Not part of the allocator's API: an allocating program never needs these.
 * They let a test drive the host backend (VPMM_BACKEND_HOST, no GPU) the way
 * a GPU program drives CUDA streams, so that cross-stream reuse, GPU-side
 * waits and zombie lifetimes are tested on a CPU, and `vpmm replay --gpu-lag`
 * model a GPU running behind the program the same way (the vpmm command
 * ships on them). The symbols are exported by libvpmm itself (they were declared in
 * vpmm.h up to 0.1.0; moving them here changed no symbol), so a test links
 * only -lvpmm. The conventions of vpmm.h hold: statuses, vpmm_last_error()
 * on failure, no exception crosses the ABI. Plain C99.
 *
 * A libvpmm built without the host backend returns VPMM_ERR_UNSUPPORTED from
 * every function here.
 */
#ifndef VPMM_HOST_STREAMS_H
#define VPMM_HOST_STREAMS_H

#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

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
/* Drain (runs queued work, even if held: the stream's own holds are dropped)
 * and destroy a stream. Handles are never reused: a destroyed stream's
 * handle stays unknown to every call. If queued work waits on another
 * stream's event that cannot complete while that stream is held, nothing is
 * destroyed: WRONG_STATE, with the work before the wait run and the stream
 * still usable (destroy it again once the other is released). Pools that
 * saw the stream must not be used with it afterwards.
 * Errors: INVALID_ARGUMENT (NULL or unknown stream), WRONG_STATE (see above,
 * or called from the stream's own worker). */
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
 * instead of deadlocking when the stream is held, or when its work waits on
 * a held stream (directly or through further waits).
 * Errors: INVALID_ARGUMENT (unknown stream), WRONG_STATE (held, or waiting
 * on a held stream). */
VPMM_API vpmm_status vpmm_host_stream_synchronize(vpmm_stream stream);

#ifdef __cplusplus
}
#endif
#endif /* VPMM_HOST_STREAMS_H */
