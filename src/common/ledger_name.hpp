// The grammar of a ledger's name, shared by the option that names one
// (config/config.cpp, vpmm_config.ledger and VPMM_LEDGER) and the ledger
// that opens it (ledger/ledger.cpp): the name becomes part of a path in
// /dev/shm, so it may hold no '/' and may not start with '.'.
#pragma once

#include <cstddef>

namespace vpmm {

constexpr size_t kLedgerNameMax = 64;

// 1-64 characters of [A-Za-z0-9_.-], not starting with '.'.
inline bool valid_ledger_name(const char* name) {
  if (!name || !*name || name[0] == '.') return false;
  size_t n = 0;
  for (const char* p = name; *p; ++p, ++n) {
    const char c = *p;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok || n >= kLedgerNameMax) return false;
  }
  return true;
}

}  // namespace vpmm
