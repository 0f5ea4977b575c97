// Configuration: defaults, the VPMM_* environment table, and validation
// against the chosen backend. One table lists every option so `vpmm info`
// can print each effective value and where it came from.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.hpp"
#include "core/pool.hpp"
#include "vpmm.h"

namespace vpmm {

struct EnvOption {
  const char* name;  // VPMM_...
  const char* help;
};
// The environment variables vpmm_config_init reads, in config_error order.
const EnvOption* env_options(int* count);

void config_defaults(vpmm_config* c);
// Applies the environment; returns 0 or index+1 of the first malformed variable.
int32_t config_apply_env(vpmm_config* c);

// Parses "123", "0x1000", "4K", "2M", "1G", "8T" (powers of 1024). False on
// junk, overflow or a negative number.
bool parse_size(const char* text, uint64_t* out);

// The page every backend uses when page_size is 0 (its granularity).
constexpr uint64_t kDefaultPageSize = 2ull << 20;
// VPMM_MAX_HANDLE_SIZE: "unlimited", "Np" (N pages of page_size, or of
// kDefaultPageSize when page_size is 0) or a size as parse_size reads it.
bool parse_handle_size(const char* text, uint64_t page_size, uint64_t* out);

// Copies at most struct_size bytes of `in` over defaults (ABI growth rule).
vpmm_status config_read(const vpmm_config* in, const char* call, vpmm_config* out);

// Resolves 0 = "backend default" fields and checks every value against the
// backend's granularity. Messages name the field and the value.
vpmm_status config_resolve(const vpmm_config& c, Backend& b, PoolOptions* out);

}  // namespace vpmm
