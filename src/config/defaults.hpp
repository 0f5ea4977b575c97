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
#define VPMM_DEFAULT_VIEW_MIN_SIZE_TEXT_ "off"
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
// Views (vpmm_config.view_min_size) are off by default. 64 MiB is what to
// ask for: swept over 16 MiB-1 GiB on the shipped and held-out training
// snapshots, it gives the lowest steady-state remapping on the MoE traces
// (11.5% against 19.7-37.9% from 96 to 384 MiB) at peaks within 1.018. But
// the live hard client on the H200 peaked at 1.027-1.044x its live bytes
// with views against 1.011 without, with twice the driver time a step: free
// memory its side streams still use is not there for a view to take when
// the request comes (docs/handles.md, "Views").
constexpr uint64_t kSuggestedViewMinSize = 64ull << 20;
// Small allocations are carved in multiples of this (and aligned to it); a
// small_size below it turns the small allocator off.
constexpr uint64_t kSmallQuantum = 256;
inline constexpr uint64_t small_charge(uint64_t requested) {
  return (requested + kSmallQuantum - 1) / kSmallQuantum * kSmallQuantum;
}
// Longest tag (bytes, without the NUL): the public VPMM_TAG_MAX_BYTES.
constexpr size_t kMaxTagLength = VPMM_TAG_MAX_BYTES;

}  // namespace vpmm
