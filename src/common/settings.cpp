// The parsers of the process-wide settings (see settings.hpp).
#include "common/settings.hpp"

#include <strings.h>

#include <cerrno>
#include <cstring>

namespace vpmm {

bool parse_log_level(const char* v, LogLevel* out) {
  static constexpr struct {
    const char* name;
    LogLevel level;
  } names[] = {{"off", LogLevel::kOff},   {"error", LogLevel::kError}, {"warn", LogLevel::kWarn},
               {"info", LogLevel::kInfo}, {"debug", LogLevel::kDebug}};
  for (const auto& n : names)
    if (strcasecmp(v, n.name) == 0) {
      *out = n.level;
      return true;
    }
  return false;
}

LogLevel log_level() {
  static const LogLevel level = [] {
    LogLevel l = LogLevel::kWarn;
    const char* v = setting_text(Setting::kLog);
    if (v && !parse_log_level(v, &l)) l = LogLevel::kWarn;
    return l;
  }();
  return level;
}

bool parse_auto_switch(const char* v, AutoSwitch* out) {
  if (std::strcmp(v, "1") == 0 || std::strcmp(v, "on") == 0)
    *out = AutoSwitch::kOn;
  else if (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0)
    *out = AutoSwitch::kOff;
  else if (*v == '\0' || std::strcmp(v, "auto") == 0)
    *out = AutoSwitch::kAuto;
  else
    return false;
  return true;
}

bool parse_page_floor(const char* v, uint64_t* out) {
  errno = 0;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 0);
  if (errno != 0 || end == v) return false;
  uint64_t mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1ull << 10, ++end;
  else if (*end == 'M' || *end == 'm') mul = 1ull << 20, ++end;
  if (*end != '\0') return false;
  const uint64_t b = static_cast<uint64_t>(n) * mul;
  if (b < 4096 || (b & (b - 1)) != 0 || b > (1ull << 30)) return false;
  *out = b;
  return true;
}

bool parse_fd_table_ahead(const char* v, uint64_t* out) {
  if (!v || *v < '0' || *v > '9') return false;  // no sign, no space, no empty
  errno = 0;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || *end != '\0' || n > kMaxFdTableAhead) return false;
  *out = n;
  return true;
}

uint64_t fd_table_ahead() {
  uint64_t n = 0;
  const char* v = setting_text(Setting::kFdTableAhead);
  if (v && parse_fd_table_ahead(v, &n)) return n;
  parse_fd_table_ahead(setting(Setting::kFdTableAhead).default_text, &n);
  return n;
}

}  // namespace vpmm
