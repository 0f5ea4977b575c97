// The text of vpmm_pool_dump_text (see dump_text.cpp).
#pragma once

#include <string>

namespace vpmm {

class Pool;

// The stats, then every region in ascending VA order, one line per VA chunk.
// Takes the pool's lock (through stats and snapshot), never the device's.
std::string dump_text(Pool& p);

}  // namespace vpmm
