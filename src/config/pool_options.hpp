// PoolOptions: a pool's resolved configuration, what config_resolve
// (config.hpp) makes of a vpmm_config against the chosen backend and what the
// core reads. It lives below the core so that the option table, which fills
// it, does not sit on top of the pool: the core includes this header, never
// the table.
//
// Its options are not written here: each VPMM_POOL_OPTION row of
// config/option_list.hpp makes a member of the same name and C type as its
// vpmm_config field, initialised to the row's pool default (the value before
// resolution; the row's help says what it means). Only what no option sets is
// declared by hand, at the end.
//
// Resolved values read differently from the fields where 0 meant "the
// default": max_handle_size 0 = scaled handles, kUnlimitedHandle = one per
// growth; small_size and large_rounding are set (page_size / 2, page_size);
// memory_limit is whole pages, 0 = none; remap_slack 0 = page-exact (always
// remap); view_min_size 0 = no views, else whole pages.
#pragma once

#include <cstdint>
#include <string>

#include "config/defaults.hpp"
#include "vpmm.h"

namespace vpmm {

struct PoolOptions {
#define VPMM_POOL_OPTION(name, env, kind, pool_default, ...) decltype(vpmm_config::name) name = pool_default;
#define VPMM_FIELD_OPTION(...)
#define VPMM_SETTING_OPTION(...)
#include "config/option_list.hpp"
#undef VPMM_POOL_OPTION
#undef VPMM_FIELD_OPTION
#undef VPMM_SETTING_OPTION

  // Not options:
  uint64_t device_total = 0;       // the backend's memory (capacity when there is no limit)
  uint64_t pause_batch_bytes = 0;  // D2H copies per pause pipeline event (0 = kPauseBatchBytes); tests
  // The placement policy consulted before the placement chain, by its name
  // in the placement registry (core/alloc/placement.hpp); null or "default":
  // none, the chain (placement) places everything.
  const char* policy = nullptr;
  // VPMM_PENDING_REUSE=1 (a setting, read with the options): the chain gets
  // the pending-reuse step before views and Phase 2 if it lacks it.
  bool pending_reuse = false;
  // VPMM_BACKUP_DIR (a setting, read with the options): the disk store's
  // directory when neither the attributes, a tag scope nor the pool name one.
  std::string backup_dir;
};

}  // namespace vpmm
