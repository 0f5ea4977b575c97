// vpmm_pool_dump_text's report: the stats a person reads first, in binary
// units, then every region in the seed notation. The regions part is made by
// the same code as vpmm_pool_layout (core/layout.hpp), so the two never
// disagree on what a region looks like.
#include "api/dump_text.hpp"

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/state/layout.hpp"
#include "core/pool.hpp"
#include "vpmm.h"

namespace vpmm {
namespace {
std::string format_bytes(uint64_t b) {
  char buf[32];
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(b);
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}
}  // namespace

std::string dump_text(Pool& p) {
  vpmm_stats s;
  p.stats(&s);
  std::vector<vpmm_region_info> regions = p.snapshot();
  std::string out;
  char line[256];
  auto add = [&](const char* name, uint64_t v) {
    std::snprintf(line, sizeof line, "  %-20s %s\n", name, format_bytes(v).c_str());
    out += line;
  };
  std::snprintf(line, sizeof line, "vpmm pool (%s backend, page %s)\n", p.backend_name(),
                format_bytes(s.page_size).c_str());
  out += line;
  add("mapped", s.mapped_bytes);
  add("live", s.live_bytes);
  add("requested", s.requested_bytes);
  add("free", s.free_bytes);
  add("holes", s.hole_bytes);
  add("zombies", s.zombie_bytes);
  add("reserved VA", s.reserved_va_bytes);
  add("peak mapped", s.peak_mapped_bytes);
  add("peak live", s.peak_live_bytes);
  std::snprintf(line, sizeof line,
                "  mallocs %" PRIu64 ", frees %" PRIu64 ", defrags %" PRIu64 ", grows %" PRIu64
                ", handles %" PRIu64 "\n",
                s.n_malloc, s.n_free, s.n_defrag, s.n_grow, s.handles);
  out += line;
  out += "regions (pages):";
  uint32_t chunk = UINT32_MAX;
  for (const vpmm_region_info& r : regions) {
    if (r.chunk != chunk) {
      chunk = r.chunk;
      std::snprintf(line, sizeof line, "\n  chunk %u: ", chunk);
      out += line;
    }
    vpmm::append_layout_region(&out, r, s.page_size);  // the one notation (core/layout.hpp)
  }
  out += "\n";
  return out;
}

}  // namespace vpmm
