// Configuration: the option table, defaults, the VPMM_* environment and
// validation against the chosen backend. The table (kOptions in config.cpp)
// is made from config/option_list.hpp, the single declaration of every
// option: its name, variable, field, parser, default, help, validation, how
// it resolves against the backend and how its effective value is shown.
// vpmm_config_init walks it, config_resolve is a loop over it plus the rules
// that involve several options, the C API exports it (vpmm_option_get,
// src/api/options_api.cpp), and `vpmm info`, the docs and the tests read it
// from there. Some of its rows are the process-wide settings of
// common/settings.hpp (no field; the layers that need them read them there).
//
// Invariant: the table's order is fixed and only grows at the end, because
// vpmm_config.config_error is an entry's index + 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/backend.hpp"
#include "common/settings.hpp"
#include "config/defaults.hpp"
#include "config/pool_options.hpp"
#include "vpmm.h"

namespace vpmm {

// Why a parser refused a value: the reason and what the option accepts (its
// range, format or names), for the message vpmm_pool_create gives. A parser
// refuses through refuse(why, ...), which returns false; `why` may be
// nullptr (vpmm_config_init only needs the verdict).
struct Refusal {
  char text[320] = "";
};
bool refuse(Refusal* why, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

struct OptionDef {
  const char* name;  // vpmm_config field, or the option's own name ("log")
  const char* env;   // VPMM_..., or nullptr when only the field sets it
  int32_t kind;      // VPMM_OPTION_*
  uint32_t offset;   // offsetof(vpmm_config, field); UINT32_MAX without a field
  uint32_t size;     // sizeof the field; 0 without a field
  // Parses an environment value into c; nullptr when vpmm_config_init does
  // not read the variable (no variable, or a process-wide setting read by
  // the layer that uses it).
  bool (*parse)(const char* text, vpmm_config* c, Refusal* why);
  const char* default_text;
  const char* help;
  // Checks the field before any backend exists (config_read); nullptr: any
  // value will do at that point.
  vpmm_status (*check)(const vpmm_config& c, const char* call);
  // Resolves the field's default (0 = the backend's, or another option's)
  // into *o and validates it, reading rows before it in table order;
  // nullptr: the pool does not take it from here.
  vpmm_status (*resolve)(const vpmm_config& c, Backend& b, const char* call, PoolOptions* o);
  // Writes the effective value into what vpmm_pool_get_config returns;
  // nullptr: the caller's value is returned as given (a process-wide
  // setting: `vpmm info` shows its variable, or its default).
  void (*show)(const PoolOptions& o, int32_t backend_kind, vpmm_config* c);
};
// The table; *count receives its length.
const OptionDef* options(uint32_t* count);
// The entry whose field name or variable is `name`; nullptr when none.
const OptionDef* find_option(const char* name, uint32_t* index);

void config_defaults(vpmm_config* c);
// Applies the environment; returns 0 or index+1 of the first malformed variable.
int32_t config_apply_env(vpmm_config* c);
// The smallest vpmm_config the library reads (the fields up to host_capacity).
constexpr uint32_t kConfigMinSize = offsetof(vpmm_config, host_capacity) + sizeof(uint64_t);
// Every size vpmm_config has had since ABI 1, today's excluded (include/
// vpmm.h's history): a caller built against an older header that sets
// struct_size to one of these before vpmm_config_init(_defaults) gets only
// that many bytes written. When the struct grows, its old size joins them.
constexpr uint32_t kConfigOlderSizes[] = {112, 120, 128, 136, 144, 152, 160, 176};
static_assert(sizeof(vpmm_config) == 184, "vpmm_config grew: append 184 to kConfigOlderSizes");
// Fills the first `size` bytes of *out (at most sizeof(vpmm_config)) with
// the defaults, and the environment when `env`; struct_size = that size.
void config_init(vpmm_config* out, uint32_t size, bool env);

// Parses "123", "0x1000", "4K", "2M", "1G", "8T" (powers of 1024). False on
// junk, overflow or a negative number, *why saying which and the format.
bool parse_size(const char* text, uint64_t* out, Refusal* why = nullptr);

// VPMM_MAX_HANDLE_SIZE: "unlimited", "Np" (N pages of page_size, or of
// kDefaultPageSize when page_size is 0) or a size as parse_size reads it.
bool parse_handle_size(const char* text, uint64_t page_size, uint64_t* out, Refusal* why = nullptr);
// "1,3" -> bits 1 and 3; "" or "none" -> 0. False for anything else.
bool parse_device_list(const char* text, uint64_t* out, Refusal* why = nullptr);


// Copies at most struct_size bytes of `in` over defaults (ABI growth rule),
// reports config_error and runs every row's check.
vpmm_status config_read(const vpmm_config* in, const char* call, vpmm_config* out);

// What the backend takes of the configuration itself (the VPMM_FIELD_OPTION
// rows of option_list.hpp that name BackendParams): its device, memory,
// chunking, peers and handle type.
BackendParams config_backend_params(const vpmm_config& c);

// Resolves 0 = "backend default" fields and checks every value against the
// backend's granularity. Messages name the field and the value, and say
// whether a value came from the backend's default rather than the caller.
vpmm_status config_resolve(const vpmm_config& c, Backend& b, PoolOptions* out);

// The configuration a pool reports (vpmm_pool_get_config): c as the caller
// gave it, with each row's effective value written over it.
void config_effective(const PoolOptions& o, int32_t backend_kind, vpmm_config* c);

}  // namespace vpmm
