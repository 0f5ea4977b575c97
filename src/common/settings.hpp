// Process-wide settings: the VPMM_* variables that set up the process rather
// than one pool (what the library logs, how the HIP runtime is found and
// treated, the LD_PRELOAD interposer), each defined once here with its
// default, its help and its parser.
//
// Why here and not in the option table (config/config.cpp): the backends
// read these when they load a driver, outside and before any pool, and a
// backend may not include the configuration layer above it. The table lists
// every row of this one among its pool options, so vpmm_option_get,
// `vpmm info` and docs/options.md show them like any option; no VPMM_*
// variable is read other than through setting_text() here or the table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "vpmm.h"

namespace vpmm {

// The rows, in the order the option table appends them (kLog is the one
// exception: the table placed it among the pool options before the others
// existed, and that order is ABI).
enum class Setting : int {
  kLog,
  kHipLibrary,
  kHipVaRecycle,
  kHipPageFloor,
  kPreloadLog,
  kPreloadTag,
  kPreloadHostBackup,
  kPreloadCtl,
  kBackupDir,
  kPendingReuse,
  kLedgerBudget,
  kFdTableAhead,
  kCount
};

struct SettingDef {
  const char* name;  // the option's name in the table ("log")
  const char* env;   // its variable
  int32_t kind;      // VPMM_OPTION_*
  const char* default_text;
  const char* help;
};

inline constexpr SettingDef kSettings[] = {
    {"log", "VPMM_LOG", VPMM_OPTION_LOG_LEVEL, "warn",
     "off|error|warn|info|debug: what the allocator hooks report on stderr"},
    {"hip_library", "VPMM_HIP_LIBRARY", VPMM_OPTION_TEXT, "unset",
     "HIP: the runtime to dlopen (a path or soname); unset = the newest of libamdhip64.so.7, .6, .5"},
    {"hip_va_recycle", "VPMM_HIP_VA_RECYCLE", VPMM_OPTION_TEXT, "auto",
     "HIP: auto|on|off|1|0: reuse of VA after unmap (the ROCm 7.2 workaround; auto = on 7.2.x only)"},
    {"hip_page_floor", "VPMM_HIP_PAGE_FLOOR", VPMM_OPTION_TEXT, "2M",
     "HIP: the least page, a power of two from 4K to 1G (K/M suffixes) whatever the runtime reports"},
    {"preload_log", "VPMM_PRELOAD_LOG", VPMM_OPTION_TEXT, "0",
     "libvpmm_preload.so: anything but empty or 0 prints every routed call on stderr"},
    {"preload_tag", "VPMM_PRELOAD_TAG", VPMM_OPTION_TEXT, "unset",
     "libvpmm_preload.so: the tag of every thread's outermost scope (pausable by that tag)"},
    {"preload_host_backup", "VPMM_PRELOAD_HOST_BACKUP", VPMM_OPTION_TEXT, "0",
     "libvpmm_preload.so: anything but empty or 0 backs up VPMM_PRELOAD_TAG memory on pause"},
    {"preload_ctl", "VPMM_PRELOAD_CTL", VPMM_OPTION_TEXT, "unset",
     "libvpmm_preload.so: path of the pause/resume control FIFO (its replies: PATH.reply)"},
    {"backup_dir", "VPMM_BACKUP_DIR", VPMM_OPTION_TEXT, "unset",
     "directory of disk-store backups (VPMM_ALLOC_BACKUP_DISK) whose allocation and pool name none"},
    {"pending_reuse", "VPMM_PENDING_REUSE", VPMM_OPTION_TEXT, "0",
     "1 = a request that no ready free region fits takes a whole free region of another stream whose "
     "work is still queued (at most 8x the request), after a GPU-side wait, before views and "
     "remapping; read when a pool is created (docs/handles.md, \"The GPU's lag on the host\")"},
    {"ledger_budget", "VPMM_LEDGER_BUDGET", VPMM_OPTION_TEXT, "unset (the device's memory)",
     "the ledger's budget for this device if this pool is the first of the device to join it: bytes "
     "(\"8G\") or a share of the device (\"80%\"); vpmm_ledger_set_budget changes it later"},
    {"fd_table_ahead", "VPMM_FD_TABLE_AHEAD", VPMM_OPTION_COUNT, "4096",
     "file descriptor table entries made ahead when the process's first pool is created: an "
     "export or import of N handles holds 2N descriptors, and each doubling of a threaded "
     "process's table waits for the kernel (docs/ipc.md, \"The descriptor table\"); 0 = none, at "
     "most 1048576 (and RLIMIT_NOFILE)"},
};
static_assert(sizeof kSettings / sizeof kSettings[0] == static_cast<size_t>(Setting::kCount),
              "one row per Setting");

inline constexpr const SettingDef& setting(Setting s) { return kSettings[static_cast<int>(s)]; }

// The variable's text as set; nullptr when unset.
inline const char* setting_text(Setting s) { return std::getenv(setting(s).env); }

// A switch: on when the variable is set to anything but empty or "0".
inline bool setting_on(Setting s) {
  const char* v = setting_text(s);
  return v != nullptr && *v != '\0' && !(v[0] == '0' && v[1] == '\0');
}

// --- VPMM_LOG ---------------------------------------------------------------

enum class LogLevel : int { kOff = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

// False for anything but the five names (case-insensitive).
bool parse_log_level(const char* text, LogLevel* out);

// The level in force, read once per process: warn when unset. A malformed
// value counts as warn here, because it is reported elsewhere: it fails
// vpmm_pool_create through config_error like any malformed pool option.
LogLevel log_level();
inline bool log_enabled(LogLevel l) { return static_cast<int>(l) <= static_cast<int>(log_level()); }

// --- VPMM_HIP_VA_RECYCLE ----------------------------------------------------

enum class AutoSwitch { kAuto, kOn, kOff };

// "1"/"on", "0"/"off", ""/"auto"; false for anything else.
bool parse_auto_switch(const char* text, AutoSwitch* out);

// --- VPMM_HIP_PAGE_FLOOR ----------------------------------------------------

// A power of two from 4 KiB to 1 GiB: an integer as strtoull base 0 reads it
// with an optional K/k or M/m suffix. Its own grammar, older than
// parse_size's, kept so that no value that worked before changes meaning.
bool parse_page_floor(const char* text, uint64_t* out);

// --- VPMM_FD_TABLE_AHEAD ----------------------------------------------------

constexpr uint64_t kMaxFdTableAhead = 1u << 20;

// A decimal count from 0 to kMaxFdTableAhead; false for anything else.
bool parse_fd_table_ahead(const char* text, uint64_t* out);

// The entries in force: the variable's when it parses, else the default
// (a malformed value fails vpmm_pool_create through config_error).
uint64_t fd_table_ahead();

}  // namespace vpmm
