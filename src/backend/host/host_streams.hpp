// Host streams and events: the host backend's stand-in for CUDA streams.
// Concern: ordered execution of host "kernels" on per-stream worker threads,
// holds that keep work in flight for tests, and events that complete when
// everything queued before them has run. Process-wide (not per backend), like
// the vpmm_host_stream_* functions of vpmm_host_streams.h, which reach the
// stream_* functions here through the backend's HostStreamControl entry.
//
// Invariants:
//  - A vpmm_stream value is only ever dereferenced after it was found in the
//    process-wide registry of live streams; NULL is the default stream, which
//    is never destroyed. An unknown value is rejected with INVALID_ARGUMENT.
//  - Every queued item (launch, event marker, cross-stream wait, copy) takes
//    the next sequence number of its stream; items run strictly in sequence
//    order and `completed` is the sequence number of the last finished item.
//    An event is (stream, seq) and is complete once completed >= seq, so an
//    event stays meaningful after its stream is destroyed (events keep the
//    stream's state alive).
//  - A stream gets a worker thread only when something is first queued on it;
//    idle streams cost no thread.
//  - No function here holds two stream locks at once, and the registry lock
//    is never held while taking a stream lock, so there is no lock order to
//    get wrong. A cross-stream wait blocks the waiting stream's worker, never
//    a caller, and never a destroy (see stream_destroy).
//
// Every function is thread safe, never throws, and on failure sets the
// thread-local error (common/status.hpp) naming the public call and the value.
#pragma once

#include <cstdint>

#include "vpmm.h"

namespace vpmm {
namespace host {

// ---- The vpmm_host_stream_* semantics (see vpmm_host_streams.h) -----------

// Create a stream; *out owns it until stream_destroy. No thread is started.
// Errors: INVALID_ARGUMENT (null out), OUT_OF_MEMORY.
vpmm_status stream_create(vpmm_stream* out);

// Release every hold, run all queued work, then destroy the stream: the value
// is invalid as soon as this is called. Blocks until the queue has drained,
// except for work queued behind a wait on another stream's still-pending
// event: that part finishes in the background once the event completes (as
// cudaStreamDestroy does), so destroying A never deadlocks on a held B.
// Events recorded on the stream stay valid.
// Errors: INVALID_ARGUMENT (NULL = default stream, or unknown stream),
// WRONG_STATE (called from the stream's own worker, i.e. from a launched fn).
vpmm_status stream_destroy(vpmm_stream s);

// Hold: nothing queued (before or after) starts until the matching release.
// Holds nest. Errors: INVALID_ARGUMENT (unknown stream).
vpmm_status stream_hold(vpmm_stream s);

// Undo one hold. Errors: INVALID_ARGUMENT (unknown), WRONG_STATE (not held).
vpmm_status stream_release(vpmm_stream s);

// Queue fn(user) on the stream's worker, after everything queued before it.
// Errors: INVALID_ARGUMENT (unknown stream, null fn), OUT_OF_MEMORY, BACKEND
// (the worker thread could not be started).
vpmm_status stream_launch(vpmm_stream s, void (*fn)(void*), void* user);

// Block until everything queued so far has run. Returns WRONG_STATE at once
// when the stream is held (or becomes held while waiting) instead of
// deadlocking, and when called from the stream's own worker.
// `who` names the caller in error messages.
// Errors: INVALID_ARGUMENT (unknown stream), WRONG_STATE.
vpmm_status stream_synchronize(vpmm_stream s, const char* who = "vpmm_host_stream_synchronize");

// True for NULL and for a live (created, not destroyed) stream.
bool stream_is_valid(vpmm_stream s);

// ---- Events and copies, for the host backend's do_* ------------------------
// An event handle is the address of a heap object (never 0), registered in a
// process-wide set so that an unknown or destroyed handle is rejected, not
// dereferenced.

// Record an event on s: it completes when everything queued on s before it
// has run. On a stream that is not held and has nothing pending it is
// complete at once (the worker is not involved); on a held stream it stays
// pending until the stream is released and has run everything before it.
// Errors: INVALID_ARGUMENT (null out, unknown stream), OUT_OF_MEMORY, BACKEND.
vpmm_status event_record(vpmm_stream s, uint64_t* out);

// Non-blocking: *done = whether the event has completed.
// Errors: INVALID_ARGUMENT (null done, unknown event).
vpmm_status event_query(uint64_t e, bool* done);

// Free the event. Work waiting on it (stream_wait_event) is unaffected.
// Errors: INVALID_ARGUMENT (unknown event).
vpmm_status event_destroy(uint64_t e);

// Block the calling thread until the event completes. An event of a held
// stream blocks until another thread releases that stream.
// Errors: INVALID_ARGUMENT (unknown event), WRONG_STATE (called from the
// worker of the event's own stream, which would wait for itself).
vpmm_status event_sync(uint64_t e);

// Everything queued on s after this call runs only after e completes. The
// caller does not block. No-op when e is already complete or belongs to s
// (a stream runs in order anyway).
// Errors: INVALID_ARGUMENT (unknown stream or event), OUT_OF_MEMORY, BACKEND.
vpmm_status stream_wait_event(vpmm_stream s, uint64_t e);

// Run fn(user) in the order of s: at once on the calling thread when s is not
// held and has nothing pending (work queued meanwhile by other threads waits
// for it), else queued on the worker like stream_launch. On failure fn has
// not run and the caller still owns `user`. `who` names the caller.
// Errors: as stream_launch.
vpmm_status stream_submit(vpmm_stream s, void (*fn)(void*), void* user, const char* who);

// Live objects, for leak checks in tests.
uint64_t live_stream_count();  // created and not destroyed (default excluded)
uint64_t live_event_count();   // recorded and not destroyed

}  // namespace host
}  // namespace vpmm
