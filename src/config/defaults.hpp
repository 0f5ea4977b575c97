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
#define VPMM_DEFAULT_DRIVER_BUDGET_ 0.01
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
// The share of elapsed time a pool may spend in the driver moving pages
// (vpmm_config.driver_budget): the "1% of the step" (docs/handles.md,
// "A driver-time budget"), below the step-to-step noise of every live client.
constexpr double kDefaultDriverBudget = VPMM_DEFAULT_DRIVER_BUDGET_;
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
// The placement chains (vpmm_config.placement, VPMM_PLACEMENT, `vpmm replay
// --policy`): the one table of their names and steps. A page-level request
// runs the steps in order until one serves it (core/alloc/page_steps.hpp
// says what each step does). A chain is a row here; a step is a file of
// core/alloc/steps/ and a line in page_steps.cpp.
enum class PageStepId : uint8_t {
  kEnd = 0,       // the chain's end
  kReap,          // Phase 0: unmap the zombies whose events completed
  kBestFit,       // Phase 1: best fit on the stream, then completed frees of others
  kPendingReuse,  // another stream's pending free region whole, after a GPU-side wait
  kViews,         // a view: the free handles mapped where they lie at a VA of its own
  kBudget,        // grow instead of moving pages when the driver budget cannot pay
  kRemap,         // Phase 2: move free pages into one span, grow by the shortfall
};
constexpr int kMaxPageSteps = 8;
struct PlacementChainDef {
  const char* name;
  PageStepId steps[kMaxPageSteps];
};
// Index = VPMM_PLACEMENT_*: append only (the value is ABI).
constexpr PlacementChainDef kPlacementChains[] = {
    {"default", {PageStepId::kReap, PageStepId::kBestFit, PageStepId::kBudget, PageStepId::kRemap}},
    {"exact", {PageStepId::kReap, PageStepId::kBestFit, PageStepId::kRemap}},
    {"views", {PageStepId::kReap, PageStepId::kBestFit, PageStepId::kViews, PageStepId::kRemap}},
    {"pending",
     {PageStepId::kReap, PageStepId::kBestFit, PageStepId::kPendingReuse, PageStepId::kBudget, PageStepId::kRemap}},
};
constexpr int32_t placement_chain_count() {
  return static_cast<int32_t>(sizeof kPlacementChains / sizeof kPlacementChains[0]);
}
// The chain's name; null past the table.
constexpr const char* placement_chain_name(int32_t p) {
  return p >= 0 && p < placement_chain_count() ? kPlacementChains[p].name : nullptr;
}
static_assert(VPMM_PLACEMENT_DEFAULT == 0 && VPMM_PLACEMENT_EXACT == 1 && VPMM_PLACEMENT_VIEWS == 2 &&
                  VPMM_PLACEMENT_PENDING == 3,
              "kPlacementChains is indexed by VPMM_PLACEMENT_*");
// How far past the bytes asked for (live allocations and the request) the
// budget step may grow instead of moving pages: past it memory comes first
// and pages move (docs/handles.md, "A driver-time budget").
constexpr double kBudgetGrowthCeiling = 0.10;
// And however little is asked for at the moment, the budget step may grow
// to this much over the loop's peak of live bytes: a loop's small steps,
// whose requests are far below the memory the pool holds for its large
// ones, grow into this allowance instead of moving pages (1.03x live: the
// memory target of docs/handles.md, "Pending frees instead of growth").
constexpr double kBudgetPeakAllowance = 0.03;
// A page operation's H100 cost in nanoseconds (shared/notes: 2 MiB
// handles), what the modelled budget clock charges (vpmm_config.budget_clock_us).
constexpr uint64_t kModelMapNs = 1600, kModelSetAccessNs = 41000, kModelUnmapNs = 31000,
                   kModelCreateNs = 16000, kModelReleaseNs = 20500;

// Longest tag (bytes, without the NUL): the public VPMM_TAG_MAX_BYTES.
constexpr size_t kMaxTagLength = VPMM_TAG_MAX_BYTES;

}  // namespace vpmm
