// `vpmm replay`'s options: the command line, the `# replay:` line of a text
// trace (its pool shape; the command line wins), and the help text. Concern:
// turning words into a ReplayOpts; cmd_replay.cpp runs the replay.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli.hpp"

namespace vcli {

// A size option: bytes with K/M/G/T, or pages (`p`) of the replay's page size,
// resolved once the page size is known.
struct SizeOpt {
  bool set = false;
  bool pages = false;
  uint64_t value = 0;
  bool resolve(uint64_t page_size, uint64_t* out) const {
    if (!pages) return *out = value, true;
    if (value > UINT64_MAX / page_size) return false;
    *out = value * page_size;
    return true;
  }
};

struct ReplayOpts {
  int32_t backend = -1;  // -1: from the environment (default AUTO)
  SizeOpt page_size, va_size, max_handle, host_capacity, small_size, large_rounding;
  bool pages_set = false;
  uint64_t pages = 0;
  std::string timeline;
  bool dump = false, check = false, quiet = false, verbose = false;
  bool summary = false;  // only the comparison table (and errors)
  bool log_remaps = false;  // a line per op that remapped or grew the pool
  bool lag = false;  // snapshots, host backend: frees PyTorch completed late stay pending that long
  uint64_t gpu_lag = 0;  // host backend: the trace's streams complete their work every gpu_lag ops
  // Bytes written between ops, timed apart from them: the pool's calls with
  // its data out of cache, as a program's work between allocations leaves it.
  uint64_t cold_bytes = 0;
  // The driver budget's modelled clock (vpmm_config.budget_clock_us): what
  // each op of the trace stands for; -1: VPMM_BUDGET_CLOCK_US, else 50.
  int64_t op_time_us = -1;
  bool expect_layout_set = false;
  std::string expect_layout;
  bool expect_mapped_set = false;
  uint64_t expect_mapped_pages = 0;
  bool release_all = false;  // free what is live, sync, trim(0), report what stays mapped
  bool expect_held_set = false;
  uint64_t expect_held_pages = 0;
  bool expect_ratio_set = false;
  double expect_max_ratio = 0;  // fail when peak mapped / peak requested exceeds it
  bool expect_steady_set = false;
  double expect_max_steady_remap = 0;  // fail when second-half remapped / peak requested exceeds it
  int device = -1;              // snapshots: the device to replay (-1: most events)
  // Placement policies (--policy): each trace is replayed once per name, in
  // order; empty: the pool's configuration as the environment leaves it.
  std::vector<std::string> policies;
  std::string policy;  // the one this replay runs (set per run by cmd_replay)
  std::vector<std::string> traces;
};

// What one replay under one policy came to: a row of --policy's comparison.
struct PolicyRow {
  std::string policy;
  bool ok = false;                 // replayed to the end, every expectation met
  double peak_ratio = 0;           // peak mapped / peak requested
  double steady_remap = 0;         // second-half remapped bytes / peak requested
  uint64_t steady_driver_calls = 0, steady_handles = 0;  // driver calls, handles created: second half
  double steady_driver_share = -1;  // second half: modelled driver time / modelled time (-1: wall clock)
  uint64_t steady_views = 0, steady_view_reuse = 0;      // view mallocs, of them with no driver call
  uint64_t views = 0;              // views at the end
};

// The placement policies --policy names, with what each sets (kPolicyHelp).
// Returns false for an unknown name.
// Whether `name` is a placement chain (vpmm_config.placement); sets it in *c
// when c is given.
bool policy_settings(const std::string& name, vpmm_config* c);
extern const char* const kPolicyHelp;


// One option at the cursor (a.take_option() done). Returns 0 when taken,
// -1 for --help, or a usage error's exit status (2) after printing it.
int parse_replay_option(ArgCursor& a, ReplayOpts& o);

// Applies the pool shape flags of a text trace's `# replay:` line to *o where
// the command line did not give them; *applied lists those that took effect.
// Returns 0, or 1 after printing why the line is malformed.
int apply_header_flags(const std::string& path, ReplayOpts* o, std::string* applied);

// "usage: vpmm replay ..." and what a TRACE is.
extern const char* const kReplayUsage;

}  // namespace vcli
