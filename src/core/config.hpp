// Configuration: the option table, defaults, the VPMM_* environment and
// validation against the chosen backend. The table (kOptions in config.cpp)
// is the single source of truth for every option's name, variable, field,
// parser, default and help: vpmm_config_init walks it, the C API exports it
// (vpmm_option_get, src/api/options_api.cpp), and `vpmm info`, the docs check
// and the tests read it from there.
//
// Invariant: the table's order is fixed and only grows at the end, because
// vpmm_config.config_error is an entry's index + 1.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.hpp"
#include "core/defaults.hpp"
#include "core/log.hpp"
#include "core/pool.hpp"
#include "vpmm.h"

namespace vpmm {

struct OptionDef {
  const char* name;  // vpmm_config field, or the option's own name ("log")
  const char* env;   // VPMM_..., or nullptr when only the field sets it
  int32_t kind;      // VPMM_OPTION_*
  uint32_t offset;   // offsetof(vpmm_config, field); UINT32_MAX without a field
  uint32_t size;     // sizeof the field; 0 without a field
  // Parses an environment value into c (nullptr without a variable).
  bool (*parse)(const char* text, vpmm_config* c);
  const char* default_text;
  const char* help;
};
// The table; *count receives its length.
const OptionDef* options(uint32_t* count);
// The entry whose field name or variable is `name`; nullptr when none.
const OptionDef* find_option(const char* name, uint32_t* index);

void config_defaults(vpmm_config* c);
// Applies the environment; returns 0 or index+1 of the first malformed variable.
int32_t config_apply_env(vpmm_config* c);

// Parses "123", "0x1000", "4K", "2M", "1G", "8T" (powers of 1024). False on
// junk, overflow or a negative number.
bool parse_size(const char* text, uint64_t* out);

// VPMM_MAX_HANDLE_SIZE: "unlimited", "Np" (N pages of page_size, or of
// kDefaultPageSize when page_size is 0) or a size as parse_size reads it.
bool parse_handle_size(const char* text, uint64_t page_size, uint64_t* out);
// "1,3" -> bits 1 and 3; "" or "none" -> 0. False for anything else.
bool parse_device_list(const char* text, uint64_t* out);


// Copies at most struct_size bytes of `in` over defaults (ABI growth rule).
vpmm_status config_read(const vpmm_config* in, const char* call, vpmm_config* out);

// Resolves 0 = "backend default" fields and checks every value against the
// backend's granularity. Messages name the field and the value, and say
// whether a value came from the backend's default rather than the caller.
vpmm_status config_resolve(const vpmm_config& c, Backend& b, PoolOptions* out);

}  // namespace vpmm
