// Pool: the facade of a pool. It holds the mutex and offers the public
// operations; each one takes the mutex (or hands it to the collaborator that
// releases it around driver work or pinning) and forwards to the collaborator
// that owns what it changes:
//
//   PoolState  (core/state/)  the backend, options, region map, counters,
//                             tags, capacity; events and handle operations
//   Allocator  (core/alloc/)  malloc and free: phases 0-2, views, small
//                             objects, the placement policy
//   Sharer     (core/share/)  exports and imports
//   Pauser     (core/pause/)  pause, resume, trim, backups and their stores
//
// They are layered in that order: each calls only those before it (and the
// narrow interfaces it implements for them). What the facade itself does is
// what spans them: the OOM and pressure callbacks, which run without the
// mutex, the driver-time tally of malloc and free, and the order of the
// pool's end. docs/design.md walks through each flow file by file.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/host_services/host_services.hpp"
#include "core/alloc/allocator.hpp"
#include "core/pause/pauser.hpp"
#include "core/share/sharer.hpp"
#include "config/pool_options.hpp"
#include "core/state/pool_state.hpp"
#include "core/state/pool_mutex.hpp"

namespace vpmm {

class Pool final {
 public:
  // A pool over `backend` and the host services `host` (pageable memory,
  // files, host copies); without them, the process's (make_host_services).
  // `admission` (may be null): asked before every handle the pool creates,
  // its initial pages included (a ledger shared with other processes).
  static vpmm_status create(std::unique_ptr<Backend> backend, std::unique_ptr<HostServices> host,
                            const PoolOptions& opt, std::unique_ptr<Pool>* out,
                            std::unique_ptr<Admission> admission = nullptr);
  static vpmm_status create(std::unique_ptr<Backend> backend, const PoolOptions& opt, std::unique_ptr<Pool>* out) {
    return create(std::move(backend), make_host_services(), opt, out);
  }
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // `call` names the public function in error messages.
  vpmm_status malloc(const char* call, uint64_t size, Stream s, const char* tag, uint32_t flags,
                     Reservation* res, void** out);
  vpmm_status free(void* ptr, Stream s);
  vpmm_status lookup(const void* ptr, void** base, uint64_t* size);
  // The host backup of the paused allocation containing ptr (vpmm_pool_backup_lookup).
  vpmm_status backup_lookup(const void* ptr, void** host, uint64_t* bytes);
  vpmm_status stream_synchronize(Stream s);
  // `s` waits on the GPU for the work queued on `on` so far (the CPU does
  // not; counted in n_stream_waits): the torch hooks' free of a tensor used
  // on other streams (hooks/recorded_streams.cpp) orders its free there.
  vpmm_status stream_wait_stream(Stream s, Stream on);
  vpmm_status stream_retire(Stream s);
  // A stream of the pool's backend for callers without a runtime of their
  // own; destroy retires it first (vpmm_pool_stream_create/_destroy).
  vpmm_status stream_create(Stream* out) { return state_.backend().stream_create(out); }
  vpmm_status stream_destroy(Stream s) {
    vpmm_status st = stream_retire(s);
    return st == VPMM_OK ? state_.backend().stream_destroy(s) : st;
  }
  const char* backend_name() const { return state_.backend().name(); }

  // Pause/resume by tag (NULL = every tag); see vpmm.h for the contract.
  // *n_changed (may be NULL) receives, on success, how many regions changed
  // state (0: nothing matched, still VPMM_OK).
  // flags: VPMM_PAUSE_* (vpmm_pool_pause_flags).
  vpmm_status pause(const char* tag, uint64_t* n_changed = nullptr, uint32_t flags = 0);
  vpmm_status resume(const char* tag, uint64_t* n_changed = nullptr, uint32_t flags = 0);
  vpmm_status trim(uint64_t keep_bytes);
  vpmm_status tag_stats(const char* tag, vpmm_tag_stats* out);
  // Pins ahead the host buffers a pause of `tag` would back up into (see
  // vpmm_pool_prepare_backups); *cached = pinned bytes cached after it.
  vpmm_status prepare_backups(const char* tag, uint64_t* cached);
  // The id of the disk-store directory of a new allocation: `dir`, else the
  // pool's default (set_backup_dir), else VPMM_BACKUP_DIR; the C API puts it
  // in the allocation's flags (core/pause/stores/store_table.hpp).
  vpmm_status backup_dir_id(const char* call, const char* dir, uint32_t* id);
  vpmm_status set_backup_dir(const char* dir);  // NULL or "": none

  // Limits and reservations (Capacity, core/state/capacity.hpp).
  vpmm_status reserve(uint64_t bytes, uint32_t flags, uint64_t timeout_ns, Reservation** out);
  vpmm_status reservation_info(const Reservation* r, uint64_t* size, uint64_t* used);
  vpmm_status release_reservation(Reservation* r);
  vpmm_status set_limit(uint64_t bytes);
  void set_oom_callback(vpmm_oom_fn fn, void* user);
  void set_pressure_callback(vpmm_pressure_fn fn, void* user);
  // Calls the pressure callback with under_pressure 1 and the mapped bytes
  // (another member of the pool's ledger asks for memory back); no mutex held.
  void report_outside_pressure();
  void set_handle(vpmm_pool* h) { handle_ = h; }

  // Sharing memory with other processes (Sharer, sharer.hpp says what each
  // does; docs/ipc.md). prepare_export, import_memory and close_import run
  // their driver calls without the mutex.
  vpmm_status export_memory(const char* call, const std::vector<const void*>& ptrs, const char* tag, bool by_tag,
                            const std::shared_ptr<ExportChannel>& ch, ExportLayout* layout, uint64_t* id);
  vpmm_status close_export(const char* call, uint64_t id);
  vpmm_status prepare_export(const char* call, const char* tag, uint64_t* n_handles);
  vpmm_status import_memory(const char* call, const ImportRequest& req, const std::shared_ptr<ImportChannel>& ch,
                            uint64_t* id, std::vector<uint64_t>* entry_ptrs);
  vpmm_status close_import(const char* call, uint64_t id);
  void ipc_stats(vpmm_ipc_stats* out);
  // The backend's calls by kind (vpmm_pool_driver_profile); reads atomics, no lock.
  void driver_profile(vpmm_driver_profile* out) const;

  void stats(vpmm_stats* out);             // fills a full-size struct
  void mark_step();                        // closes the program's step, opens the next
  std::vector<vpmm_region_info> snapshot();  // every region, ascending VA
  std::string check();                     // "" when all invariants hold

  const PoolOptions& options() const { return state_.options(); }

 private:
  Pool(std::unique_ptr<Backend> backend, std::unique_ptr<HostServices> host, const PoolOptions& opt);
  // Runs f under the mutex, then reports a watermark crossing without it
  // (pause, resume and trim change mapped bytes). after_prepares: first wait
  // until no prepare_backups is pinning.
  template <typename F>
  vpmm_status locked_with_pressure(F&& f, bool after_prepares = false);
  // Reports a pending watermark crossing; call without the mutex held.
  void report_pressure(int transition, uint64_t mapped);

  PoolMutex mu_;
  PoolState state_;  // first: the others hold references to it
  Allocator alloc_;
  Sharer sharer_;
  Pauser pauser_;
  vpmm_pool* handle_ = nullptr;  // the C handle passed to callbacks
};

}  // namespace vpmm
