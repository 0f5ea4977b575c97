// The best-fit step, Phase 1 (see page_steps.hpp): the smallest free region
// of the caller's stream (or never used) that holds the request, then the
// smallest completed free region of another stream. No synchronisation at all.
#include <tuple>

#include "core/alloc/page_steps.hpp"

namespace vpmm {

namespace {
constexpr int kOtherStreamProbe = 8;  // completed-candidates probed per foreign stream

// The best candidate of one stream's index: (size, id, va), or none. A
// template, not a std::function: this is every page-level malloc's path.
template <typename ExactOk>
const std::tuple<uint64_t, uint64_t, uint64_t>* fit_in(const StreamState* st, uint64_t bytes, bool exact,
                                                       const ExactOk& exact_ok) {
  if (!st) return nullptr;
  auto& idx = st->free_by_size;
  auto it = idx.lower_bound(std::make_tuple(bytes, uint64_t(0), uint64_t(0)));
  for (int probed = 0; it != idx.end() && probed < kOtherStreamProbe; ++it, ++probed)
    if (!exact || exact_ok(std::get<2>(*it), std::get<0>(*it))) return &*it;
  return nullptr;
}
}  // namespace

RegionIt best_fit_same_stream(StateRefs& ctx, uint64_t bytes, Stream s, bool exact) {
  RegionMap& m = ctx.m_;
  auto ok = [&](uint64_t va, uint64_t size) { return exact_run(m, va, size, bytes) != UINT64_MAX; };
  const auto* own = fit_in(m.find_stream(s), bytes, exact, ok);
  // Never-used memory is as good as the caller's own: no event to wait for.
  const auto* clean = fit_in(m.clean_state(), bytes, exact, ok);
  const auto* best = !own ? clean : !clean ? own : (*clean < *own ? clean : own);
  return best ? m.find(std::get<2>(*best)) : m.end();
}

// Equal sizes on two streams are decided by the index key, never by the
// streams map's iteration order (stream handles are heap addresses: the
// order changed from run to run under ASLR, and so did replay figures).
RegionIt best_fit_other(StateRefs& ctx, uint64_t bytes, Stream s, bool exact, bool completed_only) {
  RegionMap& m = ctx.m_;
  RegionIt best = m.end();
  std::tuple<uint64_t, uint64_t, uint64_t> best_key;
  for (const auto& kv : m.streams()) {
    if (kv.first == s) continue;
    int probed = 0;
    for (auto it = kv.second.free_by_size.lower_bound(std::make_tuple(bytes, uint64_t(0), uint64_t(0)));
         it != kv.second.free_by_size.end() && probed < kOtherStreamProbe; ++it, ++probed) {
      if (best != m.end() && !(*it < best_key)) break;
      if (exact && exact_run(m, std::get<2>(*it), std::get<0>(*it), bytes) == UINT64_MAX) continue;
      RegionIt r = m.find(std::get<2>(*it));
      bool done = false;
      if (completed_only && !(ctx.st_.is_complete(r->second, &done) == VPMM_OK && done)) continue;
      best = r;
      best_key = *it;
      break;
    }
  }
  return best;
}

uint64_t exact_run(const RegionMap& m, uint64_t va, uint64_t size, uint64_t bytes) {
  // Sliding window over the whole handles inside [va, va+size): the first run
  // of adjacent handles that adds up to exactly `bytes`.
  auto maps = m.whole_mappings_in(va, size);
  size_t lo = 0;
  uint64_t sum = 0;
  for (size_t hi = 0; hi < maps.size(); ++hi) {
    if (hi > lo && maps[hi - 1].first + maps[hi - 1].second.size != maps[hi].first) {
      lo = hi;
      sum = 0;
    }
    sum += maps[hi].second.size;
    while (sum > bytes) sum -= maps[lo++].second.size;
    if (sum == bytes) return maps[lo].first - va;
  }
  return UINT64_MAX;
}

vpmm_status step_best_fit(StepContext& ctx, PageCall& call) {
  RegionIt r = best_fit_same_stream(ctx, call.bytes, call.stream, call.exact);
  if (r == ctx.m_.end()) {
    r = best_fit_other(ctx, call.bytes, call.stream, call.exact, true);
    if (r != ctx.m_.end()) ++ctx.c_.n_cross_stream_reuse;
  }
  call.fit = r != ctx.m_.end();
  if (!call.fit) return kNextStep;
  if (ctx.views_in_chain) ctx.views.note(call.bytes, call.kind, call.attrs, true);
  call.out = r;
  return VPMM_OK;
}

}  // namespace vpmm
