// The layout notation (see layout.hpp).
#include "core/layout.hpp"

#include <cinttypes>
#include <cstdio>

namespace vpmm {

const char* layout_mark(int32_t kind) {
  switch (kind) {
    case VPMM_REGION_LIVE: return "";
    case VPMM_REGION_FREE: return "-";
    case VPMM_REGION_HOLE: return "*";
    case VPMM_REGION_ZOMBIE: return "~";
    case VPMM_REGION_SMALL: return "s";
    case VPMM_REGION_PAUSED: return "p";
    default: return "?";
  }
}

void append_layout_region(std::string* out, const vpmm_region_info& r, uint64_t page_size) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "[%s%" PRIu64 "]", layout_mark(r.kind),
                page_size ? r.size / page_size : r.size);
  *out += buf;
}

std::string format_layout(const std::vector<vpmm_region_info>& regions, uint64_t page_size) {
  std::string out;
  bool first = true;
  uint32_t chunk = 0;
  for (const vpmm_region_info& r : regions) {
    if (!first && r.chunk != chunk) out += " | ";
    first = false;
    chunk = r.chunk;
    append_layout_region(&out, r, page_size);
  }
  return out;
}

}  // namespace vpmm
