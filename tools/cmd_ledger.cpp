// `vpmm ledger NAME`: the members of a ledger (docs/ledger.md) and the
// budget of a device, read through vpmm_ledger_read; --set-budget changes
// the budget (vpmm_ledger_set_budget), --remove removes the ledger's name.
// Reading reclaims the slots of dead members, as any look does.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli.hpp"
#include "vpmm.h"

namespace vcli {

namespace {

const char* const kLedgerHelp =
    "usage: vpmm ledger NAME [--device D] [--set-budget BYTES] [--host-budget BYTES] [--remove]\n"
    "\n"
    "  lists the members of ledger NAME and the budget of device D (default 0). Per member: slot,\n"
    "  pid, device (the ledger's index of its device, 0-15, in the order devices first joined),\n"
    "  ordinal (the device's number in the member's own process, as CUDA_VISIBLE_DEVICES numbers\n"
    "  it there; - = not recorded, a member of an earlier libvpmm; ? = unreadable, fails its check),\n"
    "  admitted, mapped, reserved, backed up, evictable tags, admissions, refusals, time its\n"
    "  admissions waited, pressure requests it asked and answered, and the device's identity, by\n"
    "  which the ledger tells devices apart (the device's UUID: CUDA's is nvidia-smi -L's GPU-...;\n"
    "  the host backend's is the boot id mixed with the ordinal)\n"
    "  --set-budget BYTES   set device D's budget (\"8G\", bytes) while the ledger runs\n"
    "  --host-budget BYTES  set the host budget of backups\n"
    "  --remove             remove the ledger's name (members keep theirs; the next pool makes a new one)\n";

// "8G", "512M", "4096": a size with an optional K/M/G/T suffix (powers of 1024).
bool parse_bytes(const std::string& s, uint64_t* out) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  uint64_t mult = 1;
  switch (*end) {
    case 'K': case 'k': mult = 1ull << 10; ++end; break;
    case 'M': case 'm': mult = 1ull << 20; ++end; break;
    case 'G': case 'g': mult = 1ull << 30; ++end; break;
    case 'T': case 't': mult = 1ull << 40; ++end; break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end) return false;
  *out = static_cast<uint64_t>(v) * mult;
  return v == 0 || *out / mult == v;
}

// A device's identity as a UUID's text, or what stands in its place.
std::string id_text(uint32_t state, uint64_t hi, uint64_t lo) {
  switch (state) {
    case VPMM_LEDGER_ID_OK: {
      char b[40];
      std::snprintf(b, sizeof b, "%08llx-%04llx-%04llx-%04llx-%012llx", static_cast<unsigned long long>(hi >> 32),
                    static_cast<unsigned long long>((hi >> 16) & 0xffff), static_cast<unsigned long long>(hi & 0xffff),
                    static_cast<unsigned long long>(lo >> 48),
                    static_cast<unsigned long long>(lo & 0xffffffffffffull));
      return b;
    }
    case VPMM_LEDGER_ID_NOT_RECORDED: return "identity not recorded";
    case VPMM_LEDGER_ID_NO_DEVICE: return "no device yet";
    default: return "identity UNREADABLE";
  }
}

std::string ordinal_text(int32_t ordinal) {
  if (ordinal == VPMM_LEDGER_ORDINAL_NOT_RECORDED) return "-";
  if (ordinal < 0) return "?";
  return std::to_string(ordinal);
}

std::string wait_text(uint64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f ms", static_cast<double>(ns) / 1e6);
  return b;
}

}  // namespace

int cmd_ledger(int argc, char** argv) {
  std::string name;
  int32_t device = 0;
  bool remove = false, set_budget = false, set_host = false;
  uint64_t budget = 0, host_budget = 0;
  ArgCursor a(argc, argv);
  while (a.i < argc) {
    if (!a.next_is_option()) {
      if (!name.empty()) return usage_error("ledger: one NAME only");
      name = argv[a.i++];
      continue;
    }
    a.take_option();
    if (a.name == "--help") {
      std::fputs(kLedgerHelp, stdout);
      return 0;
    }
    if (a.name == "--remove") {
      remove = true;
      continue;
    }
    if (a.name != "--device" && a.name != "--set-budget" && a.name != "--host-budget")
      return usage_error("ledger: unknown option " + a.name);
    if (!a.take_value()) return usage_error("ledger: " + a.name + " needs a value");
    if (a.name == "--device") {
      char* end = nullptr;
      const long d = std::strtol(a.value.c_str(), &end, 10);
      if (a.value.empty() || *end || d < 0 || d >= VPMM_LEDGER_DEVICES)
        return usage_error("ledger: --device " + a.value + " is not 0-15");
      device = static_cast<int32_t>(d);
    } else if (a.name == "--set-budget") {
      if (!parse_bytes(a.value, &budget)) return usage_error("ledger: --set-budget " + a.value + " is not a size");
      set_budget = true;
    } else {
      if (!parse_bytes(a.value, &host_budget))
        return usage_error("ledger: --host-budget " + a.value + " is not a size");
      set_host = true;
    }
  }
  if (name.empty()) return usage_error("ledger: which ledger? (vpmm ledger NAME)");
  if (remove) {
    const vpmm_status st = vpmm_ledger_remove(name.c_str());
    if (st != VPMM_OK) {
      std::fprintf(stderr, "vpmm: %s\n", status_msg(st).c_str());
      return 1;
    }
    std::printf("removed ledger %s\n", name.c_str());
    return 0;
  }
  if (set_budget || set_host) {
    vpmm_status st = VPMM_OK;
    if (set_budget) st = vpmm_ledger_set_budget(name.c_str(), device, budget);
    if (st == VPMM_OK && set_host) st = vpmm_ledger_set_budget(name.c_str(), VPMM_LEDGER_HOST, host_budget);
    if (st != VPMM_OK) {
      std::fprintf(stderr, "vpmm: %s\n", status_msg(st).c_str());
      return 1;
    }
  }
  vpmm_ledger_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  std::vector<vpmm_ledger_member> ms(VPMM_LEDGER_MEMBERS);
  std::memset(ms.data(), 0, ms.size() * sizeof ms[0]);
  ms[0].struct_size = sizeof ms[0];
  uint32_t n = 0;
  const vpmm_status st =
      vpmm_ledger_read(name.c_str(), device, &info, ms.data(), static_cast<uint32_t>(ms.size()), &n);
  if (st != VPMM_OK) {
    std::fprintf(stderr, "vpmm: %s\n", status_msg(st).c_str());
    return 1;
  }
  std::printf("ledger %s\n", name.c_str());
  // The budget's line names the device: its index, then its identity.
  std::string dev = "device " + std::to_string(device);
  if (info.device_id_state != VPMM_LEDGER_ID_NO_DEVICE)
    dev += " (" + id_text(info.device_id_state, info.device_id_hi, info.device_id_lo) + ")";
  if (info.budget_corrupt)
    std::printf("  %s budget: CORRUPT (admission refuses)\n", dev.c_str());
  else if (info.budget_bytes)
    std::printf("  %s budget: %s, admitted %s (%.1f%%)\n", dev.c_str(), fmt_bytes(info.budget_bytes).c_str(),
                fmt_bytes(info.admitted_bytes).c_str(),
                100.0 * static_cast<double>(info.admitted_bytes) / static_cast<double>(info.budget_bytes));
  else
    std::printf("  %s budget: not set (no member of the device yet)\n", dev.c_str());
  if (info.host_budget_corrupt)
    std::printf("  host budget: CORRUPT\n");
  else if (info.host_budget_bytes)
    std::printf("  host budget: %s, admitted %s\n", fmt_bytes(info.host_budget_bytes).c_str(),
                fmt_bytes(info.host_admitted_bytes).c_str());
  else
    std::printf("  host budget: not set\n");
  std::printf("  members: %u%s, devices: %u, pressure requests: %llu\n", info.n_members,
              info.n_corrupt ? " (some CORRUPT: admission refuses while they are)" : "", info.n_devices,
              static_cast<unsigned long long>(info.n_pressure_requests));
  if (!n) return 0;
  std::printf("  %-4s %-8s %-6s %-7s %-10s %-10s %-10s %-10s %-9s %-10s %-7s %-9s %-6s %-8s %s\n", "slot", "pid",
              "device", "ordinal", "admitted", "mapped", "reserved", "backed up", "evictable", "admissions",
              "refused", "waited", "asked", "answered", "device identity");
  bool unreadable = false;
  for (uint32_t i = 0; i < n && i < ms.size(); ++i) {
    const vpmm_ledger_member& m = ms[i];
    if (m.corrupt) {
      std::printf("  %-4u CORRUPT (fails its checks; pid word %d)\n", m.slot, m.pid);
      continue;
    }
    std::printf("  %-4u %-8d %-6d %-7s %-10s %-10s %-10s %-10s %-9u %-10llu %-7llu %-9s %-6llu %-8llu %s\n", m.slot,
                m.pid, m.device, ordinal_text(m.ordinal).c_str(), fmt_bytes(m.admitted_bytes).c_str(),
                fmt_bytes(m.mapped_bytes).c_str(), fmt_bytes(m.reserved_bytes).c_str(),
                fmt_bytes(m.backed_up_bytes).c_str(), m.n_evictable_tags,
                static_cast<unsigned long long>(m.n_admissions), static_cast<unsigned long long>(m.n_refused),
                wait_text(m.admission_wait_ns).c_str(), static_cast<unsigned long long>(m.n_pressure_asked),
                static_cast<unsigned long long>(m.n_pressure_answered),
                id_text(m.device_id_state, m.device_id_hi, m.device_id_lo).c_str());
    unreadable |= m.ordinal == VPMM_LEDGER_ORDINAL_UNREADABLE;
  }
  if (unreadable) std::printf("  ordinal ?: the member's ordinal word fails its check (garbage: not believed)\n");
  return 0;
}

}  // namespace vcli
