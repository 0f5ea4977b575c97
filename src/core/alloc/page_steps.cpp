// The steps a chain may name (see page_steps.hpp): one line each.
#include "core/alloc/page_steps.hpp"

namespace vpmm {

PageStep page_step(PageStepId id) {
  switch (id) {
    case PageStepId::kReap: return step_reap;
    case PageStepId::kBestFit: return step_best_fit;
    case PageStepId::kPendingReuse: return step_pending_reuse;
    case PageStepId::kViews: return step_views;
    case PageStepId::kBudget: return step_budget;
    case PageStepId::kRemap: return step_remap;
    case PageStepId::kEnd: break;
  }
  return nullptr;
}

}  // namespace vpmm
