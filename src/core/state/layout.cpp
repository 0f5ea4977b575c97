// The layout notation (see layout.hpp).
#include "core/state/layout.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace vpmm {

const char* layout_mark(int32_t kind) {
  switch (kind) {
    case VPMM_REGION_LIVE: return "";
    case VPMM_REGION_FREE: return "-";
    case VPMM_REGION_HOLE: return "*";
    case VPMM_REGION_ZOMBIE: return "~";
    case VPMM_REGION_SMALL: return "s";
    case VPMM_REGION_PAUSED: return "p";
    case VPMM_REGION_LENT: return "l";
    default: return "?";
  }
}

void append_layout_region(std::string* out, const vpmm_region_info& r, uint64_t page_size) {
  char buf[64];
  if (page_size == 0 || r.size % page_size == 0) {
    std::snprintf(buf, sizeof buf, "[%s%" PRIu64 "]", layout_mark(r.kind),
                  page_size ? r.size / page_size : r.size);
  } else {
    const double pages = static_cast<double>(r.size) / static_cast<double>(page_size);
    for (int decimals = 3; decimals <= 6; ++decimals) {
      std::snprintf(buf, sizeof buf, "[%s%.*f]", layout_mark(r.kind), decimals, pages);
      // "3.000" for 3 pages and 256 bytes would read as whole pages.
      const char* dot = std::strchr(buf, '.');
      if (dot && std::strspn(dot + 1, "0") < static_cast<size_t>(decimals)) break;
    }
  }
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
