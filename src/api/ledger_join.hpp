// What the pool's creation (c_api.cpp) and the ledger's C functions
// (ledger_api.cpp) share: creating a pool, and the Admission a pool gets
// when it joins a ledger (src/ledger/, docs/ledger.md).
#pragma once

#include <memory>

#include "config/pool_options.hpp"
#include "core/state/admission.hpp"
#include "vpmm.h"

namespace vpmm {
class Backend;
namespace api {

// vpmm_pool_create's body; `ledger` NULL or "": the config's ledger, if any.
vpmm_status create_pool(const char* call, const vpmm_config* config, const char* ledger, vpmm_pool** out);

// Joins ledger `name` (NULL or "": c.ledger, the option that VPMM_LEDGER
// sets through vpmm_config_init; *out stays null when neither names one)
// for a pool of configuration `c` resolved into `opt`;
// the budget of its device is VPMM_LEDGER_BUDGET's, else the device's memory.
// The device is keyed by `backend`'s device_id (the same in every process
// whatever the ordinal); a backend that cannot tell it fails the join.
vpmm_status join_ledger(const char* call, const char* name, const vpmm_config& c, const PoolOptions& opt,
                        Backend& backend, std::unique_ptr<Admission>* out);

// After the pool's shell exists: its member answers the other members'
// pressure requests (the pool's pressure callback, trim, its evictable tags
// paused in order) on the member's watcher thread.
void ledger_attach(vpmm_pool* shell, Admission* member);
// Before the pool goes: the watcher stops (it calls into the pool).
void ledger_forget(vpmm_pool* shell);
// Before a pause of `tag`: its backups' host bytes (at most the tag's live
// bytes less what retained backups already hold) admitted against the host
// budget; OUT_OF_MEMORY refuses the pause before anything changed. When the
// budget refuses and the member allowed the disk (vpmm_pool_ledger_set_fallback)
// and the pool has a backup directory, OK with *pause_flags |=
// kPauseBackupsToDisk instead: the pause's new backups go to disk.
vpmm_status ledger_before_pause(const char* call, vpmm_pool* shell, const char* tag, uint32_t* pause_flags);
// After a pause, resume or trim: the member's host charge set to what the
// pool's backups hold (pinned, cached included, pageable and mmap).
void ledger_sync_host(vpmm_pool* shell);

}  // namespace api
}  // namespace vpmm
