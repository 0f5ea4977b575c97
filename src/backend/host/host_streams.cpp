// Host streams and events (see host_streams.hpp for the contract).
// Concern: the queue, worker thread, holds and sequence counters of each
// stream, and the registries that make stream and event values safe to pass
// in. Invariants kept here:
//  - Per stream, under its mutex: completed <= enqueued; the queue holds the
//    items numbered completed+1.. (minus the one the worker or an inline
//    submit is running); at most one item runs at a time (`running`), so items
//    finish in sequence order and `completed` only grows.
//  - A stream's worker thread keeps a shared_ptr to its stream, so a worker
//    detached by destroy can finish its queue after the registry let go.
//  - Registry objects are leaked on purpose: the default stream's worker may
//    still be parked when static destructors run at exit, and it must find
//    its mutex and queue alive.
#include "backend/host/host_streams.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/status.hpp"

namespace vpmm {
namespace host {
namespace {

struct StreamState;

// One queued item. fn set: a launch or copy. wait_stream set: a cross-stream
// wait. Neither: an event marker (only ordering, nothing to run).
struct Task {
  void (*fn)(void*) = nullptr;
  void* user = nullptr;
  std::shared_ptr<StreamState> wait_stream;
  uint64_t wait_seq = 0;
  uint64_t seq = 0;
};

struct StreamState {
  std::mutex mu;
  std::condition_variable work_cv;  // worker: runnable item, release, close, inline done
  std::condition_variable done_cv;  // waiters: `completed` grew, hold taken, worker parked
  std::deque<Task> queue;
  uint64_t enqueued = 0;   // sequence number of the last item queued (or run inline)
  uint64_t completed = 0;  // sequence number of the last item finished
  uint64_t holds = 0;
  bool running = false;           // an item (worker or inline) is executing
  bool waiting_external = false;  // the worker is parked on another stream's event
  std::shared_ptr<StreamState> waiting_on;  // that stream, while parked
  uint64_t waiting_seq = 0;                  // and the item awaited there
  bool closing = false;           // destroyed: refuses everything, drains, worker exits
  std::thread worker;             // started at the first queued item
  std::thread::id worker_id;      // so a stream never waits for itself
};

struct Event {
  std::shared_ptr<StreamState> stream;  // null: complete from the start
  uint64_t seq = 0;
};

struct Registry {
  std::mutex stream_mu;
  // Keyed by handle. Handles are numbers that are never reused, not the
  // state's address: a stale handle of a destroyed stream must never name
  // a stream created later (the pool's copy stream, say).
  std::unordered_map<void*, std::shared_ptr<StreamState>> streams;
  uintptr_t last_handle = 0;
  std::mutex event_mu;
  std::unordered_set<Event*> events;
  const std::shared_ptr<StreamState> default_stream = std::make_shared<StreamState>();
};

Registry& registry() {
  static Registry* r = new Registry;  // leaked: see the file comment
  return *r;
}

unsigned long long addr(const void* p) {
  return static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p));
}

std::shared_ptr<StreamState> find_stream(vpmm_stream s) {
  Registry& r = registry();
  if (s == nullptr) return r.default_stream;
  std::lock_guard<std::mutex> lk(r.stream_mu);
  auto it = r.streams.find(s);
  return it == r.streams.end() ? nullptr : it->second;
}

vpmm_status unknown_stream(const char* who, vpmm_stream s) {
  return fail(VPMM_ERR_INVALID_ARGUMENT,
              "%s: stream 0x%llx is not a live host stream (never created or already destroyed)",
              who, addr(s));
}

bool find_event(uint64_t e, std::shared_ptr<StreamState>* st, uint64_t* seq) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.event_mu);
  Event* ev = reinterpret_cast<Event*>(static_cast<uintptr_t>(e));
  if (e == 0 || r.events.count(ev) == 0) return false;
  *st = ev->stream;
  *seq = ev->seq;
  return true;
}

vpmm_status unknown_event(const char* who, uint64_t e) {
  return fail(VPMM_ERR_INVALID_ARGUMENT,
              "%s: event 0x%llx is not a live host event (never recorded or already destroyed)",
              who, static_cast<unsigned long long>(e));
}

// Runs every public entry point: no exception may leave this file.
template <class F>
vpmm_status guarded(const char* who, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
  } catch (const std::exception& ex) {
    return fail(VPMM_ERR_INTERNAL, "%s: unexpected exception: %s", who, ex.what());
  } catch (...) {
    return fail(VPMM_ERR_INTERNAL, "%s: unexpected exception", who);
  }
}

void worker_main(std::shared_ptr<StreamState> st) {
  std::unique_lock<std::mutex> lk(st->mu);
  for (;;) {
    st->work_cv.wait(lk, [&] {
      if (st->running) return false;  // an inline submit is executing
      return st->queue.empty() ? st->closing : st->holds == 0;
    });
    if (st->queue.empty()) return;  // destroyed and drained
    Task t = std::move(st->queue.front());
    st->queue.pop_front();
    st->running = true;
    if (t.wait_stream) {
      // Park on the other stream without holding ours, so hold/release/
      // destroy/record on this stream stay responsive. destroy watches
      // waiting_external to avoid blocking on another stream's hold.
      st->waiting_external = true;
      st->waiting_on = t.wait_stream;
      st->waiting_seq = t.wait_seq;
      st->done_cv.notify_all();
      lk.unlock();
      {
        StreamState& other = *t.wait_stream;
        std::unique_lock<std::mutex> ol(other.mu);
        other.done_cv.wait(ol, [&] { return other.completed >= t.wait_seq; });
      }
      t.wait_stream.reset();  // may free the other stream: do it unlocked
      lk.lock();
      st->waiting_external = false;
      std::shared_ptr<StreamState> other = std::move(st->waiting_on);
      lk.unlock();
      other.reset();  // as above: never freed under our lock
      lk.lock();
    } else if (t.fn) {
      lk.unlock();
      try {
        t.fn(t.user);
      } catch (...) {
        // A C callback has nowhere to report to; keep the stream alive.
      }
      lk.lock();
    }
    st->running = false;
    st->completed = t.seq;
    st->done_cv.notify_all();
  }
}

// Whether the stream `other` cannot reach item `seq` until somebody releases
// a hold: it is held, or its worker is parked on a stream that cannot reach
// the item it awaits (and so on, up to kMaxWaitChain links). Takes one
// stream mutex at a time, never nested: two threads looking at each other's
// streams cannot deadlock. The caller holds no stream mutex.
constexpr int kMaxWaitChain = 16;
bool chain_stalled(std::shared_ptr<StreamState> other, uint64_t seq) {
  for (int depth = 0; other && depth < kMaxWaitChain; ++depth) {
    std::lock_guard<std::mutex> ol(other->mu);
    if (other->completed >= seq) return false;
    if (other->holds > 0) return true;
    if (!other->waiting_external) return false;
    seq = other->waiting_seq;
    other = other->waiting_on;  // the old one stays alive through our copy until here
  }
  return false;
}

// Waits on st->done_cv until st completed item `seq` or is stalled by a
// hold (its own, or one on a stream its worker is parked on). Holds on other
// streams do not signal st's condition variable, hence the poll; the chain
// is looked at with st->mu released (see chain_stalled) and the answer
// kept only if st is still parked on the same stream.
void wait_unless_stalled(std::unique_lock<std::mutex>& lk, StreamState* st, uint64_t seq) {
  while (st->completed < seq) {
    if (st->holds > 0) return;
    if (st->waiting_external && st->waiting_on) {
      std::shared_ptr<StreamState> other = st->waiting_on;
      const uint64_t other_seq = st->waiting_seq;
      lk.unlock();
      const bool stalled = chain_stalled(other, other_seq);
      lk.lock();
      if (stalled && st->completed < seq && st->waiting_on == other) return;
    }  // dropping `other` takes no lock, so it may free a stream here
    st->done_cv.wait_for(lk, std::chrono::milliseconds(1));
  }
}

// Queue t with the next sequence number; starts the worker if needed. Caller
// holds st->mu and has checked `closing`.
vpmm_status push_locked(const std::shared_ptr<StreamState>& st, Task t, const char* who,
                        vpmm_stream s) {
  if (!st->worker.joinable()) {
    try {
      st->worker = std::thread(worker_main, st);
    } catch (const std::system_error& ex) {
      return fail(VPMM_ERR_BACKEND, "%s: cannot start the worker thread of stream 0x%llx: %s",
                  who, addr(s), ex.what());
    }
    st->worker_id = st->worker.get_id();
  }
  t.seq = st->enqueued + 1;
  st->queue.push_back(std::move(t));  // may throw bad_alloc: nothing changed yet
  st->enqueued += 1;
  st->work_cv.notify_one();
  return VPMM_OK;
}

}  // namespace

vpmm_status stream_create(vpmm_stream* out) {
  static const char* const who = "vpmm_host_stream_create";
  if (out == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: out is NULL", who);
  return guarded(who, [&] {
    auto st = std::make_shared<StreamState>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.stream_mu);
    // Aligned and far below any heap, so no binding mistakes it for memory.
    void* handle = reinterpret_cast<void*>((r.last_handle + 1) << 4);
    r.streams.emplace(handle, st);
    ++r.last_handle;
    *out = handle;
    return VPMM_OK;
  });
}

vpmm_status stream_destroy(vpmm_stream s) {
  static const char* const who = "vpmm_host_stream_destroy";
  if (s == nullptr)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: stream NULL is the default host stream, which cannot be destroyed", who);
  return guarded(who, [&] {
    std::shared_ptr<StreamState> st = find_stream(s);
    if (!st) return unknown_stream(who, s);
    {
      std::lock_guard<std::mutex> lk(st->mu);
      if (st->worker_id == std::this_thread::get_id())
        return fail(VPMM_ERR_WRONG_STATE,
                    "%s: stream 0x%llx cannot be destroyed from its own worker (a launched function)",
                    who, addr(s));
    }
    {
      // Drain first, with the stream still alive: its own holds are dropped
      // (a destroy runs held work), but work parked on another stream's
      // hold cannot run, and the caller must learn that before being told
      // the stream's work is done.
      std::unique_lock<std::mutex> lk(st->mu);
      if (st->closing) return unknown_stream(who, s);
      st->holds = 0;
      st->work_cv.notify_all();
      wait_unless_stalled(lk, st.get(), st->enqueued);
      if (st->completed != st->enqueued)
        return fail(VPMM_ERR_WRONG_STATE,
                    "%s: stream 0x%llx waits on work of a held stream; release that stream "
                    "first (this one is not destroyed)",
                    who, addr(s));
    }
    {
      Registry& r = registry();
      std::lock_guard<std::mutex> lk(r.stream_mu);
      if (r.streams.erase(s) == 0) return unknown_stream(who, s);  // a racing destroy won
    }
    std::thread worker;
    bool drained;
    {
      std::unique_lock<std::mutex> lk(st->mu);
      st->closing = true;
      st->holds = 0;
      st->work_cv.notify_all();
      st->done_cv.notify_all();
      // Only work queued by a racing thread since the drain is left.
      st->done_cv.wait(lk, [&] { return st->completed == st->enqueued || st->waiting_external; });
      drained = st->completed == st->enqueued;
      worker = std::move(st->worker);
    }
    if (worker.joinable()) {
      if (drained)
        worker.join();  // it exits as soon as it sees closing + empty queue
      else
        worker.detach();  // parked on another stream's event; it owns a reference
    }
    return VPMM_OK;
  });
}

vpmm_status stream_hold(vpmm_stream s) {
  static const char* const who = "vpmm_host_stream_hold";
  return guarded(who, [&] {
    std::shared_ptr<StreamState> st = find_stream(s);
    if (!st) return unknown_stream(who, s);
    std::lock_guard<std::mutex> lk(st->mu);
    if (st->closing) return unknown_stream(who, s);
    st->holds += 1;
    st->done_cv.notify_all();  // a synchronize in progress now returns WRONG_STATE
    return VPMM_OK;
  });
}

vpmm_status stream_release(vpmm_stream s) {
  static const char* const who = "vpmm_host_stream_release";
  return guarded(who, [&] {
    std::shared_ptr<StreamState> st = find_stream(s);
    if (!st) return unknown_stream(who, s);
    std::lock_guard<std::mutex> lk(st->mu);
    if (st->closing) return unknown_stream(who, s);
    if (st->holds == 0)
      return fail(VPMM_ERR_WRONG_STATE, "%s: stream 0x%llx is not held", who, addr(s));
    st->holds -= 1;
    if (st->holds == 0) st->work_cv.notify_all();
    return VPMM_OK;
  });
}

vpmm_status stream_launch(vpmm_stream s, void (*fn)(void*), void* user) {
  static const char* const who = "vpmm_host_stream_launch";
  if (fn == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: fn is NULL", who);
  return guarded(who, [&] {
    std::shared_ptr<StreamState> st = find_stream(s);
    if (!st) return unknown_stream(who, s);
    std::lock_guard<std::mutex> lk(st->mu);
    if (st->closing) return unknown_stream(who, s);
    Task t;
    t.fn = fn;
    t.user = user;
    return push_locked(st, std::move(t), who, s);
  });
}

vpmm_status stream_synchronize(vpmm_stream s, const char* who) {
  return guarded(who, [&] {
    std::shared_ptr<StreamState> st = find_stream(s);
    if (!st) return unknown_stream(who, s);
    std::unique_lock<std::mutex> lk(st->mu);
    if (st->closing) return unknown_stream(who, s);
    if (st->holds > 0)
      return fail(VPMM_ERR_WRONG_STATE,
                  "%s: stream 0x%llx is held (%llu holds); its work cannot complete until released",
                  who, addr(s), static_cast<unsigned long long>(st->holds));
    if (st->worker_id == std::this_thread::get_id() && st->completed < st->enqueued)
      return fail(VPMM_ERR_WRONG_STATE,
                  "%s: called on stream 0x%llx from its own worker (it would wait for itself)",
                  who, addr(s));
    const uint64_t target = st->enqueued;
    wait_unless_stalled(lk, st.get(), target);
    if (st->completed < target)
      return fail(VPMM_ERR_WRONG_STATE,
                  st->holds > 0 ? "%s: stream 0x%llx was held while waiting for it"
                                : "%s: stream 0x%llx waits on work of a held stream (release that "
                                  "stream first)",
                  who, addr(s));
    return VPMM_OK;
  });
}

// Asked on every malloc and free: no shared_ptr copy, and NULL (the default
// stream, which always exists) without the registry lock.
bool stream_is_valid(vpmm_stream s) {
  if (s == nullptr) return true;
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.stream_mu);
  return r.streams.count(s) != 0;
}

vpmm_status event_record(vpmm_stream s, uint64_t* out) {
  static const char* const who = "host event_record";
  if (out == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: out is NULL", who);
  return guarded(who, [&] {
    std::shared_ptr<StreamState> st = find_stream(s);
    if (!st) return unknown_stream(who, s);
    std::unique_ptr<Event> ev(new Event);
    {
      std::lock_guard<std::mutex> lk(st->mu);
      if (st->closing) return unknown_stream(who, s);
      if (st->completed == st->enqueued) {
        if (st->holds == 0) {
          // Idle and free to run: nothing is before this event. Complete now,
          // without a queue item or a worker thread.
        } else {
          // Held with nothing pending: the event must stay pending until the
          // release, so it needs an item of its own for the worker to pass.
          vpmm_status st_push = push_locked(st, Task{}, who, s);
          if (st_push != VPMM_OK) return st_push;
          ev->stream = st;
          ev->seq = st->enqueued;
        }
      } else if (st->holds > 0) {
        // Held while work is queued or still running: the event marks the
        // hold point, so it stays pending until the release even if the
        // item running now finishes first.
        vpmm_status st_push = push_locked(st, Task{}, who, s);
        if (st_push != VPMM_OK) return st_push;
        ev->stream = st;
        ev->seq = st->enqueued;
      } else {
        ev->stream = st;
        ev->seq = st->enqueued;  // the last item queued so far
      }
    }
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.event_mu);
    r.events.insert(ev.get());
    *out = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ev.release()));
    return VPMM_OK;
  });
}

vpmm_status event_query(uint64_t e, bool* done) {
  static const char* const who = "host event_query";
  if (done == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: done is NULL", who);
  return guarded(who, [&] {
    std::shared_ptr<StreamState> st;
    uint64_t seq = 0;
    if (!find_event(e, &st, &seq)) return unknown_event(who, e);
    if (!st) {
      *done = true;
      return VPMM_OK;
    }
    std::lock_guard<std::mutex> lk(st->mu);
    *done = st->completed >= seq;
    return VPMM_OK;
  });
}

vpmm_status event_destroy(uint64_t e) {
  static const char* const who = "host event_destroy";
  return guarded(who, [&] {
    Event* ev = reinterpret_cast<Event*>(static_cast<uintptr_t>(e));
    {
      Registry& r = registry();
      std::lock_guard<std::mutex> lk(r.event_mu);
      if (e == 0 || r.events.erase(ev) == 0) return unknown_event(who, e);
    }
    delete ev;  // unlocked: it may drop the last reference to a destroyed stream
    return VPMM_OK;
  });
}

vpmm_status event_sync(uint64_t e) {
  static const char* const who = "host event_sync";
  return guarded(who, [&] {
    std::shared_ptr<StreamState> st;
    uint64_t seq = 0;
    if (!find_event(e, &st, &seq)) return unknown_event(who, e);
    if (!st) return VPMM_OK;
    std::unique_lock<std::mutex> lk(st->mu);
    if (st->completed >= seq) return VPMM_OK;
    if (st->worker_id == std::this_thread::get_id())
      return fail(VPMM_ERR_WRONG_STATE,
                  "%s: event 0x%llx is later on the stream whose worker is calling (it would wait "
                  "for itself)",
                  who, static_cast<unsigned long long>(e));
    st->done_cv.wait(lk, [&] { return st->completed >= seq; });
    return VPMM_OK;
  });
}

vpmm_status stream_wait_event(vpmm_stream s, uint64_t e) {
  static const char* const who = "host stream_wait";
  return guarded(who, [&] {
    std::shared_ptr<StreamState> st = find_stream(s);
    if (!st) return unknown_stream(who, s);
    std::shared_ptr<StreamState> other;
    uint64_t seq = 0;
    if (!find_event(e, &other, &seq)) return unknown_event(who, e);
    if (!other || other == st) return VPMM_OK;  // complete, or ordered by s itself
    {
      std::lock_guard<std::mutex> lk(other->mu);
      if (other->completed >= seq) return VPMM_OK;
    }
    std::lock_guard<std::mutex> lk(st->mu);
    if (st->closing) return unknown_stream(who, s);
    Task t;
    t.wait_stream = std::move(other);
    t.wait_seq = seq;
    return push_locked(st, std::move(t), who, s);
  });
}

vpmm_status stream_submit(vpmm_stream s, void (*fn)(void*), void* user, const char* who) {
  if (fn == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: fn is NULL", who);
  return guarded(who, [&] {
    std::shared_ptr<StreamState> st = find_stream(s);
    if (!st) return unknown_stream(who, s);
    std::unique_lock<std::mutex> lk(st->mu);
    if (st->closing) return unknown_stream(who, s);
    if (st->holds > 0 || st->completed != st->enqueued) {
      Task t;
      t.fn = fn;
      t.user = user;
      return push_locked(st, std::move(t), who, s);
    }
    // Idle: run here, but as item `seq` of the stream, so that work queued by
    // other threads meanwhile (and the worker) waits for it, and events
    // recorded meanwhile stay pending until it is done.
    const uint64_t seq = ++st->enqueued;
    st->running = true;
    lk.unlock();
    try {
      fn(user);
    } catch (...) {
      // As in the worker: the stream must not stay marked as running.
    }
    lk.lock();
    st->running = false;
    st->completed = seq;
    st->done_cv.notify_all();
    st->work_cv.notify_all();
    return VPMM_OK;
  });
}

uint64_t live_stream_count() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.stream_mu);
  return r.streams.size();
}

uint64_t live_event_count() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.event_mu);
  return r.events.size();
}

}  // namespace host
}  // namespace vpmm
