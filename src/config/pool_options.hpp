// PoolOptions: a pool's resolved configuration, what config_resolve
// (config.hpp) makes of a vpmm_config against the chosen backend and what the
// core reads. It lives below the core so that the option table, which fills
// it, does not sit on top of the pool: the core includes this header, never
// the table.
#pragma once

#include <cstdint>

#include "config/defaults.hpp"

namespace vpmm {

struct PoolOptions {
  uint64_t page_size = 0;
  uint64_t va_size = 0;
  uint64_t initial_pages = 0;
  uint64_t max_handle_size = 0;  // 0 = scaled handles; kUnlimitedHandle = one per growth
  uint64_t small_size = 0;       // requests <= this use the small allocator
  uint64_t large_rounding = 0;   // untagged larger requests round up to this (0 = page_size: whole pages)
  uint64_t backup_cache_size = 0;  // pinned bytes kept for future backups (0 = all)
  uint64_t backup_pinned_limit = 0;  // most pinned bytes held for backups (0 = none)
  uint64_t pause_batch_bytes = 0;  // D2H copies per pause pipeline event (0 = kPauseBatchBytes); tests
  uint64_t memory_limit = 0;       // resolved hard limit (0 = none)
  uint64_t device_total = 0;       // device memory (capacity when there is no limit)
  double watermark_trigger = kDefaultWatermarkTrigger, watermark_stop = kDefaultWatermarkStop;
  double remap_slack = kDefaultRemapSlack;  // 0 = page-exact (always remap)
  uint64_t view_min_size = 0;  // smallest request a view may serve (0 = no views)
};

}  // namespace vpmm
