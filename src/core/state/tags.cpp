// TagTable (see tags.hpp).
#include "core/state/tags.hpp"

#include <cstring>

#include "config/defaults.hpp"

namespace vpmm {

vpmm_status TagTable::intern(const char* tag, uint32_t* id) {
  if (!tag || !*tag) {
    *id = 0;
    return VPMM_OK;
  }
  size_t n = strnlen(tag, kMaxTagLength + 1);
  if (n > kMaxTagLength)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "tag \"%.20s...\" is longer than %zu bytes", tag,
                kMaxTagLength);
  auto it = ids_.find(tag);
  if (it != ids_.end()) {
    *id = it->second;
    return VPMM_OK;
  }
  const uint32_t nid = static_cast<uint32_t>(names_.size());
  names_.reserve(names_.size() + 1);  // nothing changes if one of these throws
  used_.reserve(used_.size() + 1);
  ids_.emplace(tag, nid);
  names_.emplace_back(tag);
  used_.push_back(false);
  *id = nid;
  return VPMM_OK;
}

vpmm_status TagTable::find_used(const char* call, const char* tag, uint32_t* id) const {
  if (!tag) {
    *id = 0;
    return VPMM_OK;
  }
  auto it = ids_.find(tag);
  if (it == ids_.end() || !used_[it->second])
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: tag \"%.64s\" was never used by this pool%s", call,
                tag, it == ids_.end() ? "" : " (no allocation with it succeeded)");
  *id = it->second;
  return VPMM_OK;
}

}  // namespace vpmm
