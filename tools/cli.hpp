// Shared pieces of the `vpmm` command's subcommands (cmd_*.cpp): formatting,
// argument cursor, usage errors and small wrappers over the public C API.
// Only vpmm.h is used: the tool links libvpmm.so like any other client, so it
// sees exactly what a user's program sees.
#pragma once

#include <cstdint>
#include <string>

#include "vpmm.h"

namespace vcli {

// "0 B", "64 KiB", "1.5 MiB": exact when the value is a whole number of the
// unit, one decimal otherwise, so page-sized figures read exactly.
std::string fmt_bytes(uint64_t v);
// "VPMM_ERR_X: <vpmm_last_error()>".
std::string status_msg(vpmm_status st);
// "auto", "cuda", "hip", "host" ("?" otherwise).
const char* backend_arg_name(int32_t backend);

// The layout in the notation of docs/design.md, as vpmm_pool_layout writes
// it: sizes in pages; live plain, free '-', hole '*', zombie '~',
// small-object pages 's', paused 'p'; VA chunks joined by " | ". The string
// `--expect-layout` and the unit tests compare against. "?" on failure.
std::string layout_of(vpmm_pool* pool);
// vpmm_pool_stats / vpmm_pool_get_config with struct_size set.
vpmm_stats stats_of(vpmm_pool* pool);
// The pool's driver profile (vpmm_pool_driver_profile), zeroed if it fails.
vpmm_driver_profile driver_profile_of(vpmm_pool* pool);
bool get_config(vpmm_pool* pool, vpmm_config* c);

// A trace's name in a timeline: its file name without directory and without
// .trace, .pickle.gz, .pickle or .pkl (commas and quotes made '_'). `vpmm
// plot --trace` accepts a path and reduces it the same way.
std::string trace_name(const std::string& path);

// Prints "vpmm: MSG (see `vpmm help`)" and returns 2 (usage error).
int usage_error(const std::string& msg);

// Splits "--name=value" and "--name value"; take_value() is false when the
// option wants a value and none is left.
struct ArgCursor {
  ArgCursor(int c, char** v) : argc(c), argv(v) {}
  int argc;
  char** argv;
  int i = 0;
  std::string name, value;
  bool has_inline = false;
  bool next_is_option() const {
    return i < argc && argv[i][0] == '-' && argv[i][1] == '-' && argv[i][2];
  }
  void take_option();
  bool take_value();
};

// The subcommands; argv excludes the command name. Each returns the exit
// status: 0 success, 1 failure, 2 usage error.
int cmd_info(int argc, char** argv);
int cmd_replay(int argc, char** argv);
int cmd_ledger(int argc, char** argv);
int cmd_plot(int argc, char** argv);
// `vpmm replay --help`'s option list.
extern const char* const kReplayHelp;

}  // namespace vcli
