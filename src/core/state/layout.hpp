// The layout notation: the one place that turns regions into the seed's
// picture of a pool (docs/design.md). Sizes are in pages; live plain "[4]",
// free "[-6]", hole "[*6]", zombie "[~2]", small-object pages "[s1]",
// paused "[p3]", lent to a view "[l3]"; VA chunks separated by " | " (an
// active view's VA is a chunk of its own after the pool's). A region that is no whole
// number of pages (large_rounding below the page) shows its fraction with
// the fewest decimals (3 to 6) that do not hide it, e.g. "[3.008][-0.992]". The C API's
// vpmm_pool_layout and vpmm_pool_dump_text, the `vpmm` tool and the tests all
// print through these functions, so a layout string means the same thing
// wherever it is written or compared.
//
// Pure formatting: no pool, no lock. The caller passes a consistent snapshot
// (Pool::snapshot) and the pool's page size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vpmm.h"

namespace vpmm {

// The mark of a region kind: "" (live), "-", "*", "~", "s", "p", "l"; "?" for a
// value that is no VPMM_REGION_*.
const char* layout_mark(int32_t kind);

// Appends one region, e.g. "[-6]", to *out. page_size > 0.
void append_layout_region(std::string* out, const vpmm_region_info& r, uint64_t page_size);

// The whole layout, e.g. "[4][*6][1] | [11][*42]": regions in the given
// (ascending VA) order, " | " wherever the chunk index changes.
std::string format_layout(const std::vector<vpmm_region_info>& regions, uint64_t page_size);

}  // namespace vpmm
