// Shared by the libFuzzer targets: a byte reader that never runs past the
// input (a short input reads as zeros), and a fatal-check macro that prints
// the library's last error before aborting (libFuzzer saves the input).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "vpmm.h"

namespace fz {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : d_(data), n_(size) {}
  bool empty() const { return i_ >= n_; }
  size_t left() const { return i_ < n_ ? n_ - i_ : 0; }
  uint8_t u8() { return i_ < n_ ? d_[i_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return static_cast<uint32_t>(u16()) | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return static_cast<uint64_t>(u32()) | (static_cast<uint64_t>(u32()) << 32); }
  // A value that is often interesting: 0, 1, small, a power of two +-1, huge.
  uint64_t size_like() {
    switch (u8() % 8) {
      case 0: return 0;
      case 1: return u8();
      case 2: return u16();
      case 3: return u32();
      case 4: {
        uint64_t p = 1ull << (u8() % 64);
        int d = static_cast<int>(u8() % 3) - 1;
        return p + static_cast<uint64_t>(static_cast<int64_t>(d));
      }
      case 5: return UINT64_MAX - u8();
      case 6: return static_cast<uint64_t>(u16()) << 16;
      default: return u64();
    }
  }
  // Up to max bytes, stopping at a 0 byte (which is consumed).
  std::string str(size_t max) {
    size_t len = u8() % (max + 1);
    std::string s;
    for (size_t k = 0; k < len && !empty(); ++k) {
      char c = static_cast<char>(u8());
      if (c == '\0') break;
      s += c;
    }
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t i_ = 0;
};

}  // namespace fz

#define FZ_CHECK(cond, ...)                                                                \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "FUZZ CHECK FAILED %s:%d: %s\n  ", __FILE__, __LINE__, #cond);  \
      std::fprintf(stderr, __VA_ARGS__);                                                   \
      std::fprintf(stderr, "\n  last error: %s\n", vpmm_last_error());                     \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
