// VPMM_LOG: how much the library says on stderr on its own (the allocator
// hooks, which cannot return a reason to their caller). One of
// off|error|warn|info|debug, default warn; an entry of the option table
// (config.cpp), which parses it.
#pragma once

namespace vpmm {

enum class LogLevel : int { kOff = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

// False for anything but the five names (case-insensitive).
bool parse_log_level(const char* text, LogLevel* out);

// The level in force: VPMM_LOG read once per process (warn when unset; a
// malformed value also counts as warn here, and fails vpmm_pool_create
// through config_error like any malformed variable).
LogLevel log_level();
inline bool log_enabled(LogLevel l) { return static_cast<int>(l) <= static_cast<int>(log_level()); }

}  // namespace vpmm
