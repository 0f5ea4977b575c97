// Tag names and their ids. A tag is interned when an allocation asks for it
// and never forgotten, so the ids regions carry stay valid; it counts as
// used (what pause, resume and tag stats accept) once an allocation with it
// succeeded. Ids are small integers: index 0 is "untagged".
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.hpp"

namespace vpmm {

class TagTable {
 public:
  // The id of `tag` (NULL or "": 0), interned if new.
  vpmm_status intern(const char* tag, uint32_t* id);
  // After an allocation with tag `id` succeeded.
  void mark_used(uint32_t id) {
    if (id) used_[id] = true;
  }
  // The id of a used tag for `call` (NULL: 0, every tag). A tag no
  // allocation succeeded with is an error, as a pause of a misspelt tag
  // should be.
  vpmm_status find_used(const char* call, const char* tag, uint32_t* id) const;
  // Whether a region tagged `region_tag` is selected by `want` (0 = all).
  static bool matches(uint32_t region_tag, uint32_t want) {
    return region_tag != 0 && (want == 0 || region_tag == want);
  }

 private:
  std::vector<std::string> names_{""};  // [0] = untagged
  std::vector<bool> used_{false};
  std::unordered_map<std::string, uint32_t> ids_;
};

}  // namespace vpmm
