// The `vpmm` command: dispatch to one file per subcommand. `info`
// (cmd_info.cpp): version, the backend AUTO picks, every option with its
// effective value and where it came from. `replay` (cmd_replay.cpp):
// allocation traces and PyTorch snapshots on a fresh pool each, with
// fragmentation figures, timelines, invariant checks and expectations.
// `plot` (cmd_plot.cpp): a timeline as an SVG chart. `ledger` (cmd_ledger.cpp):
// the members and budget of a ledger shared between processes. Only the public C API
// (vpmm.h) is used, and the tool links libvpmm.so like any other client.
#include <cstdio>
#include <string>

#include "cli.hpp"
#include "vpmm.h"

namespace {

const char* const kHelp =
    "usage: vpmm COMMAND [ARGS]\n"
    "\n"
    "  info                      library version and ABI, the backend AUTO picks, the effective\n"
    "                            configuration of a default pool, and the VPMM_* environment\n"
    "  replay [OPTIONS] TRACE... replay allocation traces or PyTorch memory snapshots, each on a\n"
    "                            fresh pool, and print fragmentation figures\n"
    "                            (docs/trace-format.md; `vpmm replay --help`)\n"
    "  plot TIMELINE.csv -o OUT.svg [--trace NAME]\n"
    "                            chart mapped, live and requested bytes over op index\n"
    "  ledger NAME [OPTIONS]     the members of a ledger shared by the pools of several processes\n"
    "                            and its budget (docs/ledger.md; `vpmm ledger --help`)\n"
    "  help                      this text\n"
    "  version                   the library version\n"
    "\n";


}  // namespace

int main(int argc, char** argv) {
  using namespace vcli;
  // The command list only: `vpmm replay --help` has replay's options.
  if (argc < 2) {
    std::fputs(kHelp, stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "info") return cmd_info(argc - 2, argv + 2);
  if (cmd == "replay") return cmd_replay(argc - 2, argv + 2);
  if (cmd == "plot") return cmd_plot(argc - 2, argv + 2);
  if (cmd == "ledger") return cmd_ledger(argc - 2, argv + 2);
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (cmd == "version" || cmd == "--version") {
    std::printf("vpmm %s (ABI %d)\n", vpmm_version(), vpmm_abi_version());
    return 0;
  }
  return usage_error("unknown command '" + cmd + "'");
}
