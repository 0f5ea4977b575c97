// The library's fixed numbers, one definition each: every file that needs a
// default or a limit includes this instead of writing the number again, and
// the option table (config.cpp) prints the same figures from here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vpmm.h"

// Spelled as macros too so the option table's default text is the same token
// as the value (VPMM_STR_ turns the number into its help text).
#define VPMM_DEFAULT_WATERMARK_TRIGGER_ 0.85
#define VPMM_DEFAULT_WATERMARK_STOP_ 0.65
#define VPMM_DEFAULT_REMAP_SLACK_ 0.015
#define VPMM_DEFAULT_VIEW_MIN_SIZE_TEXT_ "64 MiB"
#define VPMM_STR2_(x) #x
#define VPMM_STR_(x) VPMM_STR2_(x)

namespace vpmm {

// The page every backend uses when page_size is 0 (its granularity).
constexpr uint64_t kDefaultPageSize = 2ull << 20;
// Pressure starts when mapped >= trigger x capacity, ends at <= stop x capacity.
constexpr double kDefaultWatermarkTrigger = VPMM_DEFAULT_WATERMARK_TRIGGER_;
constexpr double kDefaultWatermarkStop = VPMM_DEFAULT_WATERMARK_STOP_;
// How far past the requested bytes a malloc may grow instead of remapping
// (vpmm_config.remap_slack): the knee of the held-out training snapshots,
// where dense models stop remapping in steady state (docs/handles.md).
constexpr double kDefaultRemapSlack = VPMM_DEFAULT_REMAP_SLACK_;
// The smallest request a view serves by default (vpmm_config.view_min_size
// 0). Swept from 16 MiB to 1 GiB over the shipped training snapshots, 24-64
// MiB is a plateau (the hard client's MoE snapshot remaps 10.3-11.7% of its
// peak in the second half; from 72 MiB up its 72 MiB expert tensors are no
// longer views and it is 37.9%); 64 MiB makes the fewest views there (7
// against 19 at 32 MiB, each a VA range and a mapping per handle) and
// rounding a view to whole pages costs at most 3% of the request
// (docs/handles.md, "Placement that learns the loop").
constexpr uint64_t kDefaultViewMinSize = 64ull << 20;
// Small allocations are carved in multiples of this (and aligned to it); a
// small_size below it turns the small allocator off.
constexpr uint64_t kSmallQuantum = 256;
inline constexpr uint64_t small_charge(uint64_t requested) {
  return (requested + kSmallQuantum - 1) / kSmallQuantum * kSmallQuantum;
}
// Longest tag (bytes, without the NUL): the public VPMM_TAG_MAX_BYTES.
constexpr size_t kMaxTagLength = VPMM_TAG_MAX_BYTES;

}  // namespace vpmm
