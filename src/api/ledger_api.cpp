// The ledger's C functions (include/vpmm_ledger.h) and the join a pool's
// creation makes (ledger_join.hpp). The ledger itself is src/ledger/.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "api/ledger_join.hpp"
#include "api/pool_shell.hpp"
#include "backend/backend.hpp"
#include "common/settings.hpp"
#include "common/status.hpp"
#include "config/config.hpp"
#include "ledger/ledger.hpp"
#include "ledger/member.hpp"
#include "vpmm.h"

using vpmm::api::guarded;

// The ledger's own names for what vpmm_ledger_read reports, and the header's.
static_assert(vpmm::ledger::kDevices == VPMM_LEDGER_DEVICES && vpmm::ledger::kSlots == VPMM_LEDGER_MEMBERS,
              "the ledger's sizes are the header's");
static_assert(vpmm::ledger::kOrdinalNotRecorded == VPMM_LEDGER_ORDINAL_NOT_RECORDED &&
                  vpmm::ledger::kOrdinalUnreadable == VPMM_LEDGER_ORDINAL_UNREADABLE,
              "ordinal states");
static_assert(uint32_t(vpmm::ledger::IdState::kOk) == VPMM_LEDGER_ID_OK &&
                  uint32_t(vpmm::ledger::IdState::kNotRecorded) == VPMM_LEDGER_ID_NOT_RECORDED &&
                  uint32_t(vpmm::ledger::IdState::kUnreadable) == VPMM_LEDGER_ID_UNREADABLE &&
                  uint32_t(vpmm::ledger::IdState::kNoDevice) == VPMM_LEDGER_ID_NO_DEVICE,
              "identity states");

namespace vpmm {
namespace api {

namespace {

// VPMM_LEDGER_BUDGET: bytes as parse_size reads them, or "N%" of the device.
bool parse_budget(const char* text, uint64_t* bytes, double* fraction) {
  const size_t n = std::strlen(text);
  if (n > 1 && text[n - 1] == '%') {
    char* end = nullptr;
    const double pct = std::strtod(text, &end);
    if (end != text + n - 1 || !(pct > 0.0 && pct <= 100.0)) return false;
    *fraction = pct / 100.0;
    return true;
  }
  return parse_size(text, bytes) && *bytes > 0;
}

}  // namespace

vpmm_status join_ledger(const char* call, const char* name, const vpmm_config& c, const PoolOptions& opt,
                        Backend& backend, std::unique_ptr<Admission>* out) {
  out->reset();
  if (!name || !*name) name = c.ledger;  // the option (VPMM_LEDGER through vpmm_config_init)
  if (!name || !*name) return VPMM_OK;  // no ledger: nothing changes
  ledger::JoinRequest req;
  req.name = name;
  req.device = c.device > 0 ? static_cast<uint32_t>(c.device) : 0;
  req.device_total = opt.device_total;
  // The backend reports the device's identity; the ledger keys by it.
  uint8_t id[16];
  vpmm_status st = backend.device_id(id);
  if (st != VPMM_OK) {
    const std::string why = vpmm_last_error();
    return fail(st,
                "%s: ledger %s: the %s backend cannot tell device %d's identity, which the ledger keys devices "
                "by: %s",
                call, name, backend.name(), c.device, why.c_str());
  }
  req.device_id = id;
  if (const char* b = setting_text(Setting::kLedgerBudget)) {
    if (*b && !parse_budget(b, &req.budget_bytes, &req.budget_fraction))
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "%s: VPMM_LEDGER_BUDGET=\"%.64s\" is not a budget (bytes such as \"8G\", or a share of the "
                  "device such as \"80%%\")",
                  call, b);
  }
  std::unique_ptr<ledger::LedgerMember> m;
  st = ledger::LedgerMember::join(call, req, &m);
  if (st != VPMM_OK) return st;
  *out = std::move(m);
  return VPMM_OK;
}

namespace {
// The members of this process's pools, by shell: what vpmm_pool_ledger_evictable
// and the watchers reach. Reachable at exit: not a leak.
std::mutex g_members_mu;
std::unordered_map<vpmm_pool*, ledger::LedgerMember*>* g_members = nullptr;

ledger::LedgerMember* member_of(vpmm_pool* shell) {
  std::lock_guard<std::mutex> lock(g_members_mu);
  if (!g_members) return nullptr;
  auto it = g_members->find(shell);
  return it == g_members->end() ? nullptr : it->second;
}
}  // namespace

void ledger_attach(vpmm_pool* shell, Admission* a) {
  // Only join_ledger makes the Admission of a pool's creation.
  auto* m = static_cast<ledger::LedgerMember*>(a);
  {
    std::lock_guard<std::mutex> lock(g_members_mu);
    if (!g_members) g_members = new std::unordered_map<vpmm_pool*, ledger::LedgerMember*>();
    (*g_members)[shell] = m;
  }
  m->start_watcher([shell, m](uint64_t need) {
    // Another member is short of `need` bytes: the pool hears of it (its
    // pressure callback), gives back its cached free memory, then pauses
    // its evictable tags in their order until `need` went back.
    const uint64_t before = m->charge();
    auto freed = [&] {
      const uint64_t now = m->charge();
      return now < before ? before - now : 0;
    };
    shell->pool->report_outside_pressure();
    vpmm_pool_trim(shell, 0);
    for (const std::string& tag : m->evictable()) {
      if (freed() >= need) break;
      vpmm_pool_pause(shell, tag.c_str());
    }
  });
}

void ledger_forget(vpmm_pool* shell) {
  ledger::LedgerMember* m = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_members_mu);
    if (!g_members) return;
    auto it = g_members->find(shell);
    if (it == g_members->end()) return;
    m = it->second;
    g_members->erase(it);
  }
  m->stop_watcher();
}

vpmm_status ledger_before_pause(const char* call, vpmm_pool* shell, const char* tag, uint32_t* pause_flags) {
  ledger::LedgerMember* m = member_of(shell);
  if (!m) return VPMM_OK;
  vpmm_tag_stats ts;
  std::memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  if (shell->pool->tag_stats(tag, &ts) != VPMM_OK) return VPMM_OK;  // the pause reports a bad tag itself
  const uint64_t need = ts.live_bytes > ts.retained_bytes ? ts.live_bytes - ts.retained_bytes : 0;
  vpmm_status st = m->admit_host(call, need);
  if (st != VPMM_ERR_OUT_OF_MEMORY || !(m->fallback() & VPMM_LEDGER_FALLBACK_DISK)) return st;
  // Refused, and the member allowed the disk: disk backups hold no host
  // memory, so the pause goes on with its new backups there, if the pool
  // has a directory for them.
  std::string refusal = vpmm_last_error();
  uint32_t dir = 0;
  if (shell->pool->backup_dir_id(call, nullptr, &dir) != VPMM_OK)
    return fail(VPMM_ERR_OUT_OF_MEMORY,
                "%s (the disk fallback has no backup directory: vpmm_pool_set_backup_dir or VPMM_BACKUP_DIR)",
                refusal.c_str());
  *pause_flags |= kPauseBackupsToDisk;
  return VPMM_OK;
}

void ledger_sync_host(vpmm_pool* shell) {
  ledger::LedgerMember* m = member_of(shell);
  if (!m) return;
  vpmm_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  shell->pool->stats(&s);
  m->set_host_held(s.backup_pinned_bytes + s.backup_pageable_bytes + s.backup_mmap_bytes, s.backup_bytes);
}

}  // namespace api
}  // namespace vpmm

extern "C" {

VPMM_API vpmm_status vpmm_pool_ledger_evictable(vpmm_pool* pool, const char* const* tags, size_t n) {
  const char* call = "vpmm_pool_ledger_evictable";
  VPMM_CHECK_POOL(call, pool);
  if (n && !tags) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: tags is NULL with n %zu", call, n);
  if (n > 64) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %zu tags (at most 64)", call, n);
  return guarded(call, [&]() -> vpmm_status {
    std::vector<std::string> list;
    for (size_t i = 0; i < n; ++i) {
      if (!tags[i] || !*tags[i] || std::strlen(tags[i]) > VPMM_TAG_MAX_BYTES || std::strchr(tags[i], ','))
        return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: tags[%zu] is not a tag (1-%d bytes, no comma)", call, i,
                          VPMM_TAG_MAX_BYTES);
      list.emplace_back(tags[i]);
    }
    vpmm::ledger::LedgerMember* m = vpmm::api::member_of(pool);
    if (!m) return vpmm::fail(VPMM_ERR_WRONG_STATE, "%s: the pool is in no ledger", call);
    m->set_evictable(std::move(list));
    return VPMM_OK;
  });
}


VPMM_API vpmm_status vpmm_pool_ledger_set_fallback(vpmm_pool* pool, uint32_t flags) {
  const char* call = "vpmm_pool_ledger_set_fallback";
  VPMM_CHECK_POOL(call, pool);
  if (flags & ~uint32_t{VPMM_LEDGER_FALLBACK_DISK})
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: flags 0x%x has unknown bits", call, flags);
  return guarded(call, [&]() -> vpmm_status {
    vpmm::ledger::LedgerMember* m = vpmm::api::member_of(pool);
    if (!m) return vpmm::fail(VPMM_ERR_WRONG_STATE, "%s: the pool is in no ledger", call);
    m->set_fallback(flags);
    return VPMM_OK;
  });
}

VPMM_API vpmm_status vpmm_pool_create_ledger(const vpmm_config* config, const char* ledger, vpmm_pool** out) {
  return vpmm::api::create_pool("vpmm_pool_create_ledger", config, ledger, out);
}

VPMM_API vpmm_status vpmm_ledger_read(const char* name, int32_t device, vpmm_ledger_info* info,
                                      vpmm_ledger_member* members, uint32_t capacity, uint32_t* n_members) {
  const char* call = "vpmm_ledger_read";
  if (device < 0 || device >= VPMM_LEDGER_DEVICES)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: device %d is not 0-%d", call, device, VPMM_LEDGER_DEVICES - 1);
  // The caller's sizes: at least the first two words, at most 64 KiB.
  if (info && (info->struct_size < 8 || info->struct_size > 65536))
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: info->struct_size %u is not a vpmm_ledger_info size (expected %u)",
                      call, info->struct_size, static_cast<unsigned>(sizeof(vpmm_ledger_info)));
  if (capacity && !members)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: members is NULL with capacity %u", call, capacity);
  const uint32_t stride = capacity ? members[0].struct_size : 0;
  if (capacity && (stride < 8 || stride > 65536 || stride % 8 != 0))
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                      "%s: members[0].struct_size %u is not a vpmm_ledger_member size (expected %u)", call, stride,
                      static_cast<unsigned>(sizeof(vpmm_ledger_member)));
  return guarded(call, [&]() -> vpmm_status {
    std::unique_ptr<vpmm::ledger::Ledger> l;
    vpmm_status st = vpmm::ledger::Ledger::open(call, name, false, &l);
    if (st != VPMM_OK) return st;
    const std::vector<vpmm::ledger::MemberView> ms = l->members();
    // Each device's identity, read once: state and the two numbers.
    struct Id {
      uint32_t state;
      uint64_t hi, lo;
    };
    Id ids[VPMM_LEDGER_DEVICES + 1];
    for (uint32_t d = 0; d <= VPMM_LEDGER_DEVICES; ++d) {  // the last: a member's unreadable index
      uint8_t bytes[16];
      ids[d].state = static_cast<uint32_t>(l->device_id(d, bytes));
      vpmm::ledger::id_to_words(bytes, &ids[d].hi, &ids[d].lo);
    }
    vpmm_ledger_info full;
    std::memset(&full, 0, sizeof full);
    full.struct_size = sizeof full;
    full.device = device;
    full.n_members = static_cast<uint32_t>(ms.size());
    bool set = false;
    if (!l->budget(static_cast<uint32_t>(device), &full.budget_bytes, &set)) full.budget_corrupt = 1;
    if (!l->host_budget(&full.host_budget_bytes, &set)) full.host_budget_corrupt = 1;
    full.n_pressure_requests = l->pressure_requests();
    full.device_id_state = ids[device].state;
    full.device_id_hi = ids[device].hi;
    full.device_id_lo = ids[device].lo;
    full.n_devices = l->n_devices();
    for (const vpmm::ledger::MemberView& v : ms) {
      if (v.corrupt) {
        ++full.n_corrupt;
        continue;
      }
      if (v.device == static_cast<uint32_t>(device)) full.admitted_bytes += v.charge;
      full.host_admitted_bytes += v.host_charge;
    }
    if (info) {
      const uint32_t n = info->struct_size;
      std::memcpy(info, &full, n < sizeof full ? n : sizeof full);
      info->struct_size = n;
    }
    for (uint32_t i = 0; i < capacity && i < ms.size(); ++i) {
      const vpmm::ledger::MemberView& v = ms[i];
      vpmm_ledger_member m;
      std::memset(&m, 0, sizeof m);
      m.struct_size = stride;
      m.slot = v.slot;
      m.pid = static_cast<int32_t>(v.pid);
      m.device = static_cast<int32_t>(v.device);
      m.corrupt = v.corrupt ? 1 : 0;
      m.admitted_bytes = v.charge;
      m.mapped_bytes = v.mapped;
      m.reserved_bytes = v.reserved;
      m.backed_up_bytes = v.backed_up;
      m.host_admitted_bytes = v.host_charge;
      m.n_admissions = v.n_admissions;
      m.n_refused = v.n_refused;
      m.admission_wait_ns = v.wait_ns;
      m.n_pressure_asked = v.n_pressure_asked;
      m.n_pressure_answered = v.n_pressure_answered;
      m.ordinal = v.ordinal;
      const Id& id = ids[v.device < VPMM_LEDGER_DEVICES ? v.device : VPMM_LEDGER_DEVICES];
      m.device_id_state = id.state;
      m.device_id_hi = id.hi;
      m.device_id_lo = id.lo;
      m.n_evictable_tags = v.tags.empty() ? 0 : 1 + static_cast<uint32_t>(std::count(v.tags.begin(), v.tags.end(), ','));
      char* dst = reinterpret_cast<char*>(members) + static_cast<size_t>(i) * stride;
      std::memcpy(dst, &m, stride < sizeof m ? stride : sizeof m);
    }
    if (n_members) *n_members = static_cast<uint32_t>(ms.size());
    return VPMM_OK;
  });
}

VPMM_API vpmm_status vpmm_ledger_set_budget(const char* name, int32_t device, uint64_t bytes) {
  const char* call = "vpmm_ledger_set_budget";
  if (device != VPMM_LEDGER_HOST && (device < 0 || device >= VPMM_LEDGER_DEVICES))
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: device %d is not 0-%d or VPMM_LEDGER_HOST", call, device,
                      VPMM_LEDGER_DEVICES - 1);
  return guarded(call, [&]() -> vpmm_status {
    std::unique_ptr<vpmm::ledger::Ledger> l;
    vpmm_status st = vpmm::ledger::Ledger::open(call, name, false, &l);
    if (st != VPMM_OK) return st;
    if (device == VPMM_LEDGER_HOST)
      l->set_host_budget(bytes);
    else
      l->set_budget(static_cast<uint32_t>(device), bytes);
    return VPMM_OK;
  });
}

VPMM_API vpmm_status vpmm_ledger_remove(const char* name) {
  const char* call = "vpmm_ledger_remove";
  return guarded(call, [&]() -> vpmm_status { return vpmm::ledger::Ledger::remove(call, name); });
}

}  // extern "C"
