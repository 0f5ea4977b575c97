// Ledger (see ledger.hpp and docs/ledger.md).
#include "ledger/ledger.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "common/ledger_name.hpp"
#include "common/status.hpp"
#include "ledger/process_identity.hpp"

namespace vpmm {
namespace ledger {

namespace {

constexpr uint64_t kStateMask = 3ull << 62;
// How long a joiner waits for a creator that is between its O_EXCL create
// and the publication of the magic.
constexpr int kInitWaitMs = 1000;

std::string shm_path(const char* name) { return std::string("/vpmm.ledger.") + name; }

uint64_t field_of(uint64_t base, uint64_t owner) { return base ^ (owner_gen(owner) << 32); }

void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, nullptr);
}

uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

uint64_t random_nonce() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = mix(static_cast<uint64_t>(ts.tv_nsec) ^ (static_cast<uint64_t>(ts.tv_sec) << 30) ^ ::getpid());
  }
  return v ? v : 1;
}

// Zeroes a checked word of generation `owner` by CAS: a word another
// generation wrote (a member that claimed the slot since) is left alone.
void zero_word(Word& w, uint64_t base, uint64_t owner, uint64_t nonce) {
  uint64_t cur = w.load();
  uint64_t units = 0;
  if (cur != 0 && decode_units(cur, field_of(base, owner), nonce, &units)) w.compare_exchange_strong(cur, 0);
}

void zero_figures(Slot& s) {
  for (Word* w : {&s.mapped, &s.reserved, &s.backed_up, &s.n_admissions, &s.n_refused, &s.wait_ns,
                  &s.n_pressure_asked, &s.n_pressure_answered, &s.heartbeat_ns, &s.pending, &s.pressure_answered,
                  &s.ordinal, &s.pressure_taken})
    w->store(0);
  for (Word& w : s.tags) w.store(0);
}

// A slot's charge words as a reader should show them: read between two
// equal looks at its pending word, with no claim in flight or with a claim
// flagged as held by one of them (which the caller subtracts). An unflagged
// claim is a moment of change (before the flag, or being taken back): it is
// waited out, a bounded number of times; a slot that never settles (a
// member of an earlier libvpmm mid-claim for that long, or garbage) is read
// as it is, with no claim subtracted.
struct SettledCharge {
  uint64_t charge_word = 0, host_word = 0, pending = 0;
};
constexpr int kSettleTries = 1000;

SettledCharge settled_charge(const Slot& s) {
  SettledCharge r;
  for (int tries = 0; tries < kSettleTries; ++tries) {
    const uint64_t p1 = s.pending.load();
    r.charge_word = s.charge.load();
    r.host_word = s.host_charge.load();
    const uint64_t p2 = s.pending.load();
    const bool still = p1 == p2 && s.charge.load() == r.charge_word && s.host_charge.load() == r.host_word;
    if (still && (p1 == 0 || (p1 & (kClaimInCharge | kClaimInHostCharge)))) {
      r.pending = p1;
      return r;
    }
    sched_yield();
  }
  r.pending = 0;
  return r;
}

// Units less a flagged claim's, never below zero (a garbage claim).
uint64_t less_claim(uint64_t units, uint64_t pending, uint64_t flag) {
  if (!(pending & flag)) return units;
  const uint64_t c = claim_units(pending);
  return units > c ? units - c : 0;
}

}  // namespace

bool Ledger::valid_name(const char* name) { return valid_ledger_name(name); }

vpmm_status Ledger::open(const char* call, const char* name, bool create, std::unique_ptr<Ledger>* out,
                         bool* created) {
  if (created) *created = false;
  if (!valid_name(name))
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: ledger name \"%.80s\" is not 1-64 characters of [A-Za-z0-9_.-] (not starting with '.')",
                call, name ? name : "(null)");
  const std::string path = shm_path(name);
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (create) {
      int fd = shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd >= 0) {
        // The umask may have taken bits; 0600 exactly is what joiners check.
        if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(kSegmentBytes)) != 0) {
          const int e = errno;
          ::close(fd);
          shm_unlink(path.c_str());
          return fail(e == ENOSPC || e == ENOMEM ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_BACKEND,
                      "%s: cannot size ledger %s: %s", call, name, std::strerror(e));
        }
        void* m = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
          const int e = errno;
          ::close(fd);
          shm_unlink(path.c_str());
          return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: cannot map ledger %s: %s", call, name, std::strerror(e));
        }
        Segment* seg = static_cast<Segment*>(m);  // zero-filled by ftruncate
        const uint64_t nonce = random_nonce();
        const uint64_t pid = ProcessIdentity::self_pid();
        Header& h = seg->header;
        h.version.store(kVersion);
        h.header_bytes.store(kHeaderBytes);
        h.segment_bytes.store(kSegmentBytes);
        h.slots.store(kSlots);
        h.devices.store(kDevices);
        h.nonce.store(nonce);
        h.creator_pid.store(pid);
        h.check.store(header_check(nonce, pid));
        h.magic.store(kMagic, std::memory_order_release);  // last: joiners wait for it
        out->reset(new Ledger(name, fd, seg, nonce, pid));
        if (created) *created = true;
        return VPMM_OK;
      }
      if (errno != EEXIST)
        return fail(errno == EACCES ? VPMM_ERR_WRONG_STATE : VPMM_ERR_BACKEND, "%s: cannot create ledger %s: %s",
                    call, name, std::strerror(errno));
    }
    int fd = shm_open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0) {
      if (errno == ENOENT && create) continue;  // removed between the two opens: create it
      if (errno == ENOENT) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: there is no ledger %s", call, name);
      if (errno == EACCES || errno == ELOOP)
        return fail(VPMM_ERR_WRONG_STATE, "%s: ledger %s cannot be opened (%s): it is another user's, or not a file",
                    call, name, std::strerror(errno));
      return fail(VPMM_ERR_BACKEND, "%s: cannot open ledger %s: %s", call, name, std::strerror(errno));
    }
    struct stat st;
    bool ok = fstat(fd, &st) == 0;
    const char* why = nullptr;
    if (!ok) why = "fstat failed";
    else if (!S_ISREG(st.st_mode)) why = "it is not a regular file";
    else if (st.st_uid != geteuid()) why = "it belongs to another user";
    else if ((st.st_mode & 07777) != 0600) why = "its mode is not 0600 (group or others may reach it)";
    // A creator between its create and its ftruncate: wait a little.
    for (int ms = 0; !why && st.st_size == 0 && ms < kInitWaitMs; ++ms) {
      sleep_ms(1);
      if (fstat(fd, &st) != 0) why = "fstat failed";
    }
    if (!why && static_cast<uint64_t>(st.st_size) != kSegmentBytes)
      why = st.st_size == 0 ? "it is empty (its creator died while making it? remove it)"
                            : "its size is not this version's ledger's";
    if (why) {
      ::close(fd);
      return fail(VPMM_ERR_WRONG_STATE, "%s: refusing ledger %s: %s", call, name, why);
    }
    void* m = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: cannot map ledger %s: %s", call, name, std::strerror(e));
    }
    Segment* seg = static_cast<Segment*>(m);
    Header& h = seg->header;
    for (int ms = 0; h.magic.load(std::memory_order_acquire) != kMagic && ms < kInitWaitMs; ++ms) sleep_ms(1);
    const uint64_t nonce = h.nonce.load(), pid = h.creator_pid.load();
    if (h.magic.load(std::memory_order_acquire) != kMagic) why = "no ledger magic (not initialised, or overwritten)";
    else if (h.version.load() != kVersion) why = "another layout version";
    else if (h.header_bytes.load() != kHeaderBytes || h.segment_bytes.load() != kSegmentBytes ||
             h.slots.load() != kSlots || h.devices.load() != kDevices)
      why = "its header's sizes are not this version's";
    else if (h.check.load() != header_check(nonce, pid)) why = "its header fails its check (corrupt)";
    if (why) {
      munmap(m, kSegmentBytes);
      ::close(fd);
      return fail(VPMM_ERR_WRONG_STATE, "%s: refusing ledger %s: %s", call, name, why);
    }
    out->reset(new Ledger(name, fd, seg, nonce, pid));
    return VPMM_OK;
  }
  return fail(VPMM_ERR_BACKEND, "%s: ledger %s kept appearing and disappearing", call, name);
}

vpmm_status Ledger::remove(const char* call, const char* name) {
  if (!valid_name(name))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: ledger name \"%.80s\" is not a ledger name", call,
                name ? name : "(null)");
  if (shm_unlink(shm_path(name).c_str()) != 0) {
    if (errno == ENOENT) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: there is no ledger %s", call, name);
    return fail(VPMM_ERR_BACKEND, "%s: cannot remove ledger %s: %s", call, name, std::strerror(errno));
  }
  return VPMM_OK;
}

Ledger::~Ledger() {
  if (seg_) munmap(seg_, kSegmentBytes);
  if (fd_ >= 0) ::close(fd_);
}

bool Ledger::header_ok() const {
  const Header& h = seg_->header;
  return h.magic.load() == kMagic && h.version.load() == kVersion && h.header_bytes.load() == kHeaderBytes &&
         h.segment_bytes.load() == kSegmentBytes && h.slots.load() == kSlots && h.devices.load() == kDevices &&
         h.nonce.load() == nonce_ && h.creator_pid.load() == creator_ && h.check.load() == header_check(nonce_, creator_);
}

// --- budgets ---------------------------------------------------------------

bool Ledger::budget(uint32_t device, uint64_t* bytes, bool* set) const {
  const uint64_t w = seg_->header.budget[device % kDevices].load();
  *set = w != 0;
  *bytes = 0;
  if (!w) return true;
  uint64_t units = 0;
  if (!decode_units(w, kBudgetField + device, nonce_, &units)) return false;
  *bytes = bytes_of(units);
  return true;
}

void Ledger::set_budget(uint32_t device, uint64_t bytes) {
  seg_->header.budget[device % kDevices].store(encode_units(units_down(bytes), kBudgetField + device, nonce_));
}

void Ledger::init_budget(uint32_t device, uint64_t bytes) {
  uint64_t unset = 0;
  seg_->header.budget[device % kDevices].compare_exchange_strong(
      unset, encode_units(units_down(bytes), kBudgetField + device, nonce_));
}

bool Ledger::host_budget(uint64_t* bytes, bool* set) const {
  const uint64_t w = seg_->header.host_budget.load();
  *set = w != 0;
  *bytes = 0;
  if (!w) return true;
  uint64_t units = 0;
  if (!decode_units(w, kHostBudgetField, nonce_, &units)) return false;
  *bytes = bytes_of(units);
  return true;
}

void Ledger::set_host_budget(uint64_t bytes) {
  seg_->header.host_budget.store(encode_units(units_down(bytes), kHostBudgetField, nonce_));
}

void Ledger::init_host_budget(uint64_t bytes) {
  uint64_t unset = 0;
  seg_->header.host_budget.compare_exchange_strong(unset, encode_units(units_down(bytes), kHostBudgetField, nonce_));
}

// --- devices ---------------------------------------------------------------

vpmm_status Ledger::device_index(const char* call, uint64_t key, uint32_t* index) {
  if (!header_ok()) return fail(VPMM_ERR_WRONG_STATE, "%s: ledger %s: its header was overwritten", call, name_.c_str());
  const uint64_t k = key & kMaxUnits;
  for (uint32_t i = 0; i < kDevices; ++i) {
    Word& w = seg_->header.device_key[i];
    const uint64_t mine = encode_units(k, kDeviceKeyField + i, nonce_);
    uint64_t cur = w.load();
    if (cur == 0 && w.compare_exchange_strong(cur, mine)) {  // cur: the winner's word when another was first
      *index = i;
      return VPMM_OK;
    }
    uint64_t units = 0;
    if (!decode_units(cur, kDeviceKeyField + i, nonce_, &units))
      return fail(VPMM_ERR_WRONG_STATE,
                  "%s: ledger %s: entry %u of its device table fails its check (corrupt); remove the ledger "
                  "(vpmm ledger %s --remove) once its members are gone",
                  call, name_.c_str(), i, name_.c_str());
    if (units == k) {
      *index = i;
      return VPMM_OK;
    }
  }
  return fail(VPMM_ERR_UNSUPPORTED, "%s: ledger %s budgets %u devices already, none of them this one", call,
              name_.c_str(), kDevices);
}

void Ledger::record_device_id(uint32_t index, const uint8_t id[16]) {
  if (index >= kDevices) return;
  uint64_t w[2];
  id_to_words(id, &w[0], &w[1]);
  for (uint32_t k = 0; k < 2; ++k) {
    uint64_t unset = 0;  // written already (by another joiner of this device, or garbage): left alone
    seg_->header.device_id[index][k].compare_exchange_strong(unset, w[k] ^ id_mask(nonce_, index, k));
  }
}

IdState Ledger::device_id(uint32_t index, uint8_t out[16]) const {
  std::memset(out, 0, 16);
  if (index >= kDevices) return IdState::kUnreadable;
  const Header& h = seg_->header;
  const uint64_t kw = h.device_key[index].load();
  if (kw == 0) return IdState::kNoDevice;
  uint64_t key = 0;
  if (!decode_units(kw, kDeviceKeyField + index, nonce_, &key)) return IdState::kUnreadable;
  const uint64_t w0 = h.device_id[index][0].load(), w1 = h.device_id[index][1].load();
  if (w0 == 0 || w1 == 0) return IdState::kNotRecorded;  // an earlier libvpmm's entry, or being written
  uint8_t id[16];
  words_to_id(w0 ^ id_mask(nonce_, index, 0), w1 ^ id_mask(nonce_, index, 1), id);
  // Garbage passes 1 in 2^40: the key is 40 bits of a hash of the identity.
  if (device_key(id) != key) return IdState::kUnreadable;
  std::memcpy(out, id, 16);
  return IdState::kOk;
}

uint32_t Ledger::n_devices() const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < kDevices; ++i) n += seg_->header.device_key[i].load() != 0;
  return n;
}

// --- slots -----------------------------------------------------------------

bool Ledger::ident_ok(uint32_t i, uint64_t owner) {
  Slot& s = slot(i);
  return s.ident.load() == slot_ident(owner & ~kStateMask, s.start_time.load(), s.device.load(), nonce_);
}

bool Ledger::reclaim_if_dead(uint32_t i, uint64_t owner) {
  const uint32_t pid = owner_pid(owner);
  if (pid == ProcessIdentity::self_pid()) return false;  // this process's slots are alive
  Slot& s = slot(i);
  const bool id = ident_ok(i, owner);
  const bool alive = id ? ProcessIdentity::alive(pid, s.start_time.load()) : ProcessIdentity::pid_exists(pid);
  if (alive) return false;
  // Only a slot whose words can be believed is reclaimed: a corrupt one
  // may be a live member's, overwritten, and dropping it would admit past
  // the budget. It stays, and admissions refuse while it does.
  uint64_t u = 0;
  const uint64_t cw = s.charge.load(), hw = s.host_charge.load();
  const bool charge_ok = cw == 0 || decode_units(cw, field_of(charge_field(i), owner), nonce_, &u);
  const bool host_ok = hw == 0 || decode_units(hw, field_of(host_charge_field(i), owner), nonce_, &u);
  if (!charge_ok || !host_ok || ((cw || hw) && !id)) return false;
  const uint64_t reclaiming = owner_word(kReclaiming, owner_gen(owner), pid);
  if (owner_state(owner) != kReclaiming) {
    uint64_t expect = owner;
    if (!s.owner.compare_exchange_strong(expect, reclaiming)) return false;  // someone else moved it
  }
  zero_word(s.charge, charge_field(i), owner, nonce_);
  zero_word(s.host_charge, host_charge_field(i), owner, nonce_);
  zero_figures(s);
  uint64_t expect = reclaiming;
  s.owner.compare_exchange_strong(expect, owner_word(kFree, owner_gen(owner) + 1, 0));
  return true;
}

vpmm_status Ledger::claim(const char* call, uint32_t device, uint32_t ordinal, uint32_t* out_slot,
                          uint64_t* out_owner) {
  if (!header_ok()) return fail(VPMM_ERR_WRONG_STATE, "%s: ledger %s: its header was overwritten", call, name_.c_str());
  const uint32_t pid = ProcessIdentity::self_pid();
  const uint64_t start = ProcessIdentity::self_start_time();
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t i = 0; i < kSlots; ++i) {
      Slot& s = slot(i);
      uint64_t o = s.owner.load();
      if (owner_state(o) != kFree) {
        if (pass == 0 || !reclaim_if_dead(i, o)) continue;
        o = s.owner.load();
        if (owner_state(o) != kFree) continue;
      }
      if (o & 0xffffffffull) continue;  // a free word with a pid: garbage, leave it
      if (s.charge.load() != 0 || s.host_charge.load() != 0) continue;  // free but charged: garbage
      const uint64_t claiming = owner_word(kClaiming, owner_gen(o), pid);
      if (!s.owner.compare_exchange_strong(o, claiming)) continue;
      zero_figures(s);
      const uint64_t seq_now = seg_->header.pressure_seq.load();
      s.pressure_answered.store(seq_now);  // earlier requests are not its to answer
      s.pressure_taken.store(seq_now);
      s.start_time.store(start);
      s.device.store(device);
      const uint64_t active = owner_word(kActive, owner_gen(o), pid);
      s.ordinal.store(encode_units(uint64_t{ordinal} + 1, field_of(ordinal_field(i), active), nonce_));
      s.ident.store(slot_ident(active & ~kStateMask, start, device, nonce_));
      s.owner.store(active);
      *out_slot = i;
      *out_owner = active;
      return VPMM_OK;
    }
  }
  return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: ledger %s has no free slot (%u members, all alive)", call, name_.c_str(),
              kSlots);
}

void Ledger::leave(uint32_t i, uint64_t owner) {
  Slot& s = slot(i);
  const uint64_t reclaiming = owner_word(kReclaiming, owner_gen(owner), owner_pid(owner));
  uint64_t expect = owner;
  if (!s.owner.compare_exchange_strong(expect, reclaiming)) return;  // not ours any more: leave it be
  zero_word(s.charge, charge_field(i), owner, nonce_);
  zero_word(s.host_charge, host_charge_field(i), owner, nonce_);
  zero_figures(s);
  expect = reclaiming;
  s.owner.compare_exchange_strong(expect, owner_word(kFree, owner_gen(owner) + 1, 0));
}

DeviceSum Ledger::scan(uint32_t device, bool host, int self) {
  DeviceSum sum;
  if (!header_ok()) {
    sum.corrupt_slot = static_cast<int>(kSlots);
    sum.corrupt_why = "the ledger's header was overwritten";
    return sum;
  }
  for (uint32_t i = 0; i < kSlots; ++i) {
    Slot& s = slot(i);
    const uint64_t o = s.owner.load();
    Word& w = host ? s.host_charge : s.charge;
    const uint64_t base = host ? host_charge_field(i) : charge_field(i);
    uint64_t cw = w.load();
    if (owner_state(o) == kFree) {
      if (cw != 0 && sum.corrupt_slot < 0) {
        sum.corrupt_slot = static_cast<int>(i);
        sum.corrupt_why = "a free slot holds a charge";
      }
      continue;
    }
    if (reclaim_if_dead(i, o)) continue;
    cw = w.load();
    uint64_t units = 0;
    if (cw != 0 && !decode_units(cw, field_of(base, o), nonce_, &units)) {
      if (sum.corrupt_slot < 0) {
        sum.corrupt_slot = static_cast<int>(i);
        sum.corrupt_why = "its charge fails its check";
      }
      continue;
    }
    const bool id = ident_ok(i, o);
    if (units && !id) {
      if (sum.corrupt_slot < 0) {
        sum.corrupt_slot = static_cast<int>(i);
        sum.corrupt_why = "its identity fails its check";
      }
      continue;
    }
    if (!host && s.device.load() != device) continue;
    if (static_cast<int>(i) != self && s.pending.load() != 0) sum.others_pending = true;
    if (!units) continue;
    sum.units = sat_add(sum.units, units);
    sum.holders.push_back({owner_pid(o), i, units});
  }
  std::sort(sum.holders.begin(), sum.holders.end(),
            [](const DeviceSum::Holder& a, const DeviceSum::Holder& b) { return a.units > b.units; });
  return sum;
}

void Ledger::answers(uint32_t device, uint32_t self, uint64_t seq, uint32_t* others, uint32_t* answered,
                     uint32_t* answering) {
  *others = *answered = *answering = 0;
  for (uint32_t i = 0; i < kSlots; ++i) {
    if (i == self) continue;
    Slot& s = slot(i);
    const uint64_t o = s.owner.load();
    if (owner_state(o) != kActive || !ident_ok(i, o) || s.device.load() != device) continue;
    if (reclaim_if_dead(i, o)) continue;
    ++*others;
    if (s.pressure_answered.load() >= seq)
      ++*answered;
    else if (s.pressure_taken.load() >= seq)
      ++*answering;
  }
}

std::vector<MemberView> Ledger::members() {
  std::vector<MemberView> out;
  for (uint32_t i = 0; i < kSlots; ++i) {
    Slot& s = slot(i);
    const uint64_t o = s.owner.load();
    if (owner_state(o) == kFree && s.charge.load() == 0 && s.host_charge.load() == 0) continue;
    if (owner_state(o) != kFree && reclaim_if_dead(i, o)) continue;
    MemberView v;
    v.slot = i;
    v.pid = owner_pid(o);
    const uint64_t dev = s.device.load();
    v.device = dev < kDevices ? static_cast<uint32_t>(dev) : kDevices;
    // Believed only through its check, and only as a number to show.
    const uint64_t ow = s.ordinal.load();
    uint64_t ord = 0;
    if (ow == 0) v.ordinal = kOrdinalNotRecorded;
    else if (!decode_units(ow, field_of(ordinal_field(i), o), nonce_, &ord) || ord == 0 || ord - 1 > INT32_MAX)
      v.ordinal = kOrdinalUnreadable;
    else v.ordinal = static_cast<int32_t>(ord - 1);
    uint64_t u = 0;
    const SettledCharge sc = settled_charge(s);
    const uint64_t cw = sc.charge_word, hw = sc.host_word;
    v.corrupt = owner_state(o) == kFree || !ident_ok(i, o);
    if (cw == 0) v.charge = 0;
    else if (decode_units(cw, field_of(charge_field(i), o), nonce_, &u))
      v.charge = bytes_of(less_claim(u, sc.pending, kClaimInCharge));
    else v.corrupt = true;
    if (hw == 0) v.host_charge = 0;
    else if (decode_units(hw, field_of(host_charge_field(i), o), nonce_, &u))
      v.host_charge = bytes_of(less_claim(u, sc.pending, kClaimInHostCharge));
    else v.corrupt = true;
    if (owner_state(o) != kActive && !v.charge && !v.host_charge && !v.corrupt) continue;  // claiming, leaving
    v.mapped = s.mapped.load();
    v.reserved = s.reserved.load();
    v.backed_up = s.backed_up.load();
    v.n_admissions = s.n_admissions.load();
    v.n_refused = s.n_refused.load();
    v.wait_ns = s.wait_ns.load();
    v.n_pressure_asked = s.n_pressure_asked.load();
    v.n_pressure_answered = s.n_pressure_answered.load();
    v.heartbeat_ns = s.heartbeat_ns.load();
    char tags[kTagsBytes + 1];
    for (size_t k = 0; k < kTagsBytes / 8; ++k) {
      const uint64_t t = s.tags[k].load();
      std::memcpy(tags + 8 * k, &t, 8);
    }
    tags[kTagsBytes] = '\0';
    for (const char* p = tags; *p; ++p) v.tags.push_back(*p >= 0x20 && *p < 0x7f ? *p : '?');
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace ledger
}  // namespace vpmm
