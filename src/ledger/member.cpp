// LedgerMember (see member.hpp and docs/ledger.md, "Admission: no lock").
#include "ledger/member.hpp"

#include <time.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/status.hpp"
#include "ledger/process_identity.hpp"

namespace vpmm {
namespace ledger {

namespace {

// A refusal is retried only while another member was claiming at the same
// moment (both may have seen the other's claim and both backed off); a
// stopped member's stale claim ends the retries after about this many.
constexpr int kAttempts = 64;
// How long an admission the budget refused waits for the other members to
// take its request (a live watcher takes it within milliseconds; one that has
// not by then is stopped, busy or gone, and is not waited for) ...
constexpr int kPressureWaitMs = 1000;
// ... and how long, at most, for a member that took it to finish answering:
// a pause that backs gigabytes up takes seconds, and under a loaded host
// (or a sanitizer) even a small one can take longer than the first bound.
constexpr int kAnsweringWaitMs = 30000;

uint64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void backoff(int attempt) {
  thread_local std::minstd_rand rng(static_cast<unsigned>(now_ns() ^ ProcessIdentity::self_pid()));
  const long us = 20 + static_cast<long>(rng() % (50u + 10u * static_cast<unsigned>(attempt)));
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, nullptr);
}

double mib(uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

uint64_t field_of(uint64_t base, uint64_t owner) { return base ^ (owner_gen(owner) << 32); }

}  // namespace

vpmm_status LedgerMember::join(const char* call, const JoinRequest& req, std::unique_ptr<LedgerMember>* out) {
  std::unique_ptr<Ledger> l;
  vpmm_status st = Ledger::open(call, req.name, true, &l);
  if (st != VPMM_OK) return st;
  // The device's index in this ledger, by identity: processes that number
  // the device differently (CUDA_VISIBLE_DEVICES) share its budget.
  uint8_t ordinal_id[16] = {'o', 'r', 'd', 'i', 'n', 'a', 'l'};
  for (int i = 0; i < 4; ++i) ordinal_id[12 + i] = static_cast<uint8_t>(req.device >> (8 * i));
  const uint8_t* id = req.device_id ? req.device_id : ordinal_id;
  uint32_t device = 0;
  st = l->device_index(call, device_key(id), &device);
  if (st != VPMM_OK) return st;
  l->record_device_id(device, id);  // shown by vpmm_ledger_read, so the index names a GPU
  uint64_t budget = req.budget_bytes;
  if (!budget && req.budget_fraction > 0.0)
    budget = static_cast<uint64_t>(req.budget_fraction * static_cast<double>(req.device_total));
  if (!budget) budget = req.device_total;
  if (budget) l->init_budget(device, budget);
  uint32_t slot = 0;
  uint64_t owner = 0;
  st = l->claim(call, device, req.device, &slot, &owner);
  if (st != VPMM_OK) return st;
  out->reset(new LedgerMember(std::move(l), device, slot, owner));
  return VPMM_OK;
}

LedgerMember::~LedgerMember() {
  stop_watcher();
  ledger_->leave(slot_, owner_);
}

void LedgerMember::start_watcher(Responder r) {
  std::lock_guard<std::mutex> lock(watch_mu_);
  if (watcher_.joinable()) return;
  responder_ = std::move(r);
  stopping_ = false;
  watcher_ = std::thread([this] { watch(); });
}

void LedgerMember::stop_watcher() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable() && watcher_.get_id() != std::this_thread::get_id()) watcher_.join();
}

// The watcher: a look at the request counter every 2 ms (a load of one
// shared word), and an answer to each new request of this device from
// another member. A heartbeat shows it runs.
void LedgerMember::watch() {
  Slot& s = ledger_->slot(slot_);
  uint64_t seen = s.pressure_answered.load();
  std::unique_lock<std::mutex> lock(watch_mu_);
  while (!stopping_) {
    watch_cv_.wait_for(lock, std::chrono::milliseconds(2));
    if (stopping_) break;
    s.heartbeat_ns.store(now_ns());
    const Ledger::Request r = ledger_->request();
    if (r.seq == seen) continue;
    seen = r.seq;
    if (r.device == device_ && r.slot != slot_ && responder_) {
      s.pressure_taken.store(seen);  // the asker waits for this answer longer than for silence
      lock.unlock();
      responder_(r.bytes);
      lock.lock();
      s.n_pressure_answered.store(++n_answered_);
    }
    s.pressure_answered.store(seen);
  }
}

bool LedgerMember::publish_host(uint64_t bytes) {
  if (broken_) return false;
  Slot& s = ledger_->slot(slot_);
  if (s.owner.load() != owner_) {
    broken_ = true;
    return false;
  }
  const uint64_t want =
      bytes ? encode_units(units_up(bytes), field_of(host_charge_field(slot_), owner_), ledger_->nonce()) : 0;
  uint64_t expect = host_word_;
  if (!s.host_charge.compare_exchange_strong(expect, want)) {
    broken_ = true;
    return false;
  }
  host_word_ = want;
  return true;
}

vpmm_status LedgerMember::admit_host(const char* call, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return refuse_broken("a pause's backup", bytes);
  if (!bytes) return VPMM_OK;
  Slot& s = ledger_->slot(slot_);
  uint64_t budget = 0;
  bool set = false;
  DeviceSum sum;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    // The same claim-then-look order as the device's admission.
    s.pending.store(units_up(bytes));
    if (!publish_host(host_charge_ + bytes)) {
      s.pending.store(0);
      return refuse_broken("a pause's backup", bytes);
    }
    s.pending.store(kClaimInHostCharge | (units_up(host_charge_ + bytes) - units_up(host_charge_)));
    sum = ledger_->scan(device_, true, static_cast<int>(slot_));
    const bool ok = ledger_->host_budget(&budget, &set);
    if (sum.corrupt_slot < 0 && ok && (!set || sum.units <= units_down(budget))) {
      host_charge_ += bytes;
      s.pending.store(0);
      return VPMM_OK;
    }
    s.pending.store(units_up(bytes));  // unflagged: the word is about to change back
    const bool back = publish_host(host_charge_);
    s.pending.store(0);
    if (!back) return refuse_broken("a pause's backup", bytes);
    if (!ok)
      return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: ledger %s: the host budget is corrupt; nothing was paused", call,
                  ledger_->name().c_str());
    if (sum.corrupt_slot >= 0)
      return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: ledger %s: slot %d cannot be trusted (%s); nothing was paused", call,
                  ledger_->name().c_str(), sum.corrupt_slot, sum.corrupt_why);
    if (!sum.others_pending) break;
    backoff(attempt);
  }
  const uint64_t tentative = units_up(host_charge_ + bytes) - units_up(host_charge_);
  const uint64_t held = sum.units >= tentative ? sum.units - tentative : 0;
  return fail(VPMM_ERR_OUT_OF_MEMORY,
              "%s: ledger %s: backups of %" PRIu64 " bytes would pass the host budget of %" PRIu64
              " bytes (%.1f MiB of host memory held for backups by its members); nothing was paused",
              call, ledger_->name().c_str(), bytes, budget, mib(bytes_of(held)));
}

void LedgerMember::set_host_held(uint64_t host_bytes, uint64_t backed_up) {
  std::lock_guard<std::mutex> lock(mu_);
  if (publish_host(host_bytes)) host_charge_ = host_bytes;
  ledger_->slot(slot_).backed_up.store(backed_up);
}

void LedgerMember::set_evictable(std::vector<std::string> tags) {
  std::lock_guard<std::mutex> lock(mu_);
  tags_ = std::move(tags);
  std::string shown;
  for (const std::string& t : tags_) shown += (shown.empty() ? "" : ",") + t;
  char buf[kTagsBytes] = {};
  std::strncpy(buf, shown.c_str(), sizeof buf - 1);
  Slot& s = ledger_->slot(slot_);
  for (size_t k = 0; k < kTagsBytes / 8; ++k) {
    uint64_t w = 0;
    std::memcpy(&w, buf + 8 * k, 8);
    s.tags[k].store(w);
  }
}

std::vector<std::string> LedgerMember::evictable() {
  std::lock_guard<std::mutex> lock(mu_);
  return tags_;
}

uint64_t LedgerMember::charge() {
  std::lock_guard<std::mutex> lock(mu_);
  return charge_;
}

bool LedgerMember::publish(uint64_t bytes) {
  if (broken_) return false;
  Slot& s = ledger_->slot(slot_);
  if (s.owner.load() != owner_) {
    broken_ = true;
    return false;
  }
  const uint64_t want = bytes ? encode_units(units_up(bytes), field_of(charge_field(slot_), owner_), ledger_->nonce()) : 0;
  uint64_t expect = word_;
  if (!s.charge.compare_exchange_strong(expect, want)) {
    broken_ = true;
    return false;
  }
  word_ = want;
  return true;
}

void LedgerMember::show() {
  Slot& s = ledger_->slot(slot_);
  s.mapped.store(mapped_);
  s.reserved.store(credit_);
  s.n_admissions.store(n_admissions_);
  s.n_refused.store(n_refused_);
  s.wait_ns.store(wait_ns_);
  s.heartbeat_ns.store(now_ns());
}

vpmm_status LedgerMember::refuse_broken(const char* what, uint64_t bytes) {
  ++n_refused_;
  return fail(VPMM_ERR_OUT_OF_MEMORY,
              "ledger %s: %s of %" PRIu64 " bytes refused: this member's slot %u was rewritten by another process, "
              "so nothing more is admitted",
              ledger_->name().c_str(), what, bytes, slot_);
}

vpmm_status LedgerMember::try_admit(uint64_t bytes, DeviceSum* sum, uint64_t* budget, bool* budget_ok) {
  Slot& s = ledger_->slot(slot_);
  bool budget_set = false;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    // Claim first (the pending hint, then the charge), then look: see
    // member.hpp for why this order admits nobody past the budget.
    s.pending.store(units_up(bytes));
    if (!publish(charge_ + bytes)) {
      s.pending.store(0);
      return VPMM_ERR_WRONG_STATE;
    }
    s.pending.store(kClaimInCharge | (units_up(charge_ + bytes) - units_up(charge_)));
    if (race_point_) race_point_();
    *sum = ledger_->scan(device_, false, static_cast<int>(slot_));
    *budget_ok = ledger_->budget(device_, budget, &budget_set);
    const bool fits = sum->corrupt_slot < 0 && *budget_ok && (!budget_set || sum->units <= units_down(*budget));
    if (fits) {
      charge_ += bytes;
      s.pending.store(0);
      return VPMM_OK;
    }
    s.pending.store(units_up(bytes));  // unflagged: the word is about to change back
    const bool taken_back = publish(charge_);
    s.pending.store(0);
    if (!taken_back) return VPMM_ERR_WRONG_STATE;
    if (sum->corrupt_slot >= 0 || !*budget_ok || !sum->others_pending) break;
    backoff(attempt);
  }
  return VPMM_ERR_OUT_OF_MEMORY;
}

vpmm_status LedgerMember::admit_shared(std::unique_lock<std::mutex>& lock, uint64_t bytes, const char* what) {
  if (broken_) return refuse_broken(what, bytes);
  const uint64_t t0 = now_ns();
  DeviceSum sum;
  uint64_t budget = 0;
  bool budget_ok = true;
  vpmm_status st = try_admit(bytes, &sum, &budget, &budget_ok);
  if (st == VPMM_ERR_OUT_OF_MEMORY && sum.corrupt_slot < 0 && budget_ok) {
    // Over the budget: if anyone else holds memory on the device, ask.
    bool others = false;
    for (const DeviceSum::Holder& h : sum.holders) others |= h.slot != slot_;
    if (others) {
      st = ask_others(lock, bytes, what);
      wait_ns_ += now_ns() - t0;
      if (st == VPMM_OK) ++n_admissions_;
      show();
      return st;
    }
  }
  wait_ns_ += now_ns() - t0;
  if (st == VPMM_OK) {
    ++n_admissions_;
    return VPMM_OK;
  }
  if (st == VPMM_ERR_WRONG_STATE) return refuse_broken(what, bytes);
  return refuse(what, bytes, sum, budget, budget_ok, "");
}

vpmm_status LedgerMember::ask_others(std::unique_lock<std::mutex>& lock, uint64_t bytes, const char* what) {
  Slot& s = ledger_->slot(slot_);
  const uint64_t seq = ledger_->ask(device_, bytes, slot_);
  s.n_pressure_asked.store(++n_asked_);
  const uint64_t t0 = now_ns();
  const uint64_t take_deadline = t0 + kPressureWaitMs * 1000000ull;
  const uint64_t answer_deadline = t0 + kAnsweringWaitMs * 1000000ull;
  DeviceSum sum;
  uint64_t budget = 0;
  bool budget_ok = true;
  uint32_t others = 0, answered = 0, answering = 0;
  vpmm_status st = VPMM_ERR_OUT_OF_MEMORY;
  for (;;) {
    // Dropped while waiting: this member's own watcher and releases need it.
    lock.unlock();
    struct timespec ts = {0, 2 * 1000000L};
    nanosleep(&ts, nullptr);
    lock.lock();
    ledger_->answers(device_, slot_, seq, &others, &answered, &answering);
    st = try_admit(bytes, &sum, &budget, &budget_ok);
    if (st != VPMM_ERR_OUT_OF_MEMORY || sum.corrupt_slot >= 0 || !budget_ok) break;
    if (answered == others) break;  // all answered, and this try came after
    const uint64_t now = now_ns();
    // Time is up: nobody is still answering once the others had their
    // chance to take the request, or the answering ones had theirs.
    if ((now > take_deadline && !answering) || now > answer_deadline) break;
  }
  if (st == VPMM_OK) return VPMM_OK;
  if (st == VPMM_ERR_WRONG_STATE) return refuse_broken(what, bytes);
  char asked[200];
  const double waited_ms = static_cast<double>(now_ns() - t0) / 1e6;
  if (answering)
    std::snprintf(asked, sizeof asked,
                  "; asked the other members to give memory back: %u of %u answered within %.0f ms (%u still "
                  "answering after the %d ms bound)",
                  answered, others, waited_ms, answering, kAnsweringWaitMs);
  else
    std::snprintf(asked, sizeof asked,
                  "; asked the other members to give memory back: %u of %u answered within %.0f ms", answered,
                  others, waited_ms);
  return refuse(what, bytes, sum, budget, budget_ok, asked);
}

vpmm_status LedgerMember::refuse(const char* what, uint64_t bytes, DeviceSum& sum, uint64_t budget, bool budget_ok,
                                 const char* asked) {
  ++n_refused_;
  show();
  if (!budget_ok)
    return fail(VPMM_ERR_OUT_OF_MEMORY, "ledger %s: %s of %" PRIu64 " bytes refused: the budget of device %u is corrupt",
                ledger_->name().c_str(), what, bytes, device_);
  if (sum.corrupt_slot >= 0)
    return fail(VPMM_ERR_OUT_OF_MEMORY,
                "ledger %s: %s of %" PRIu64 " bytes refused: slot %d cannot be trusted (%s); remove the ledger "
                "(vpmm ledger %s --remove) once its members are gone",
                ledger_->name().c_str(), what, bytes, sum.corrupt_slot, sum.corrupt_why, ledger_->name().c_str());
  // Who holds what: the largest holders, this process's own charge among them.
  // The sum holds this member's claim as it published it; shown without.
  const uint64_t tentative = units_up(charge_ + bytes) - units_up(charge_);
  uint64_t admitted = sum.units - (sum.units >= tentative ? tentative : sum.units);
  for (DeviceSum::Holder& h : sum.holders)
    if (h.slot == slot_) h.units -= h.units >= tentative ? tentative : h.units;
  char holders[512];
  size_t n = 0;
  holders[0] = '\0';
  uint64_t others = 0;
  const uint32_t self = ProcessIdentity::self_pid();
  for (size_t i = 0; i < sum.holders.size(); ++i) {
    const DeviceSum::Holder& h = sum.holders[i];
    if (!h.units) continue;
    if (i < 6 && n < sizeof holders - 64)
      n += static_cast<size_t>(std::snprintf(holders + n, sizeof holders - n, "%spid %u%s %.1f MiB", n ? ", " : "",
                                             h.pid, h.pid == self ? " (this process)" : "", mib(bytes_of(h.units))));
    else
      others += bytes_of(h.units);
  }
  if (others && n < sizeof holders - 48)
    std::snprintf(holders + n, sizeof holders - n, ", others %.1f MiB", mib(others));
  return fail(VPMM_ERR_OUT_OF_MEMORY,
              "ledger %s: %s of %" PRIu64 " bytes on device %u would pass its budget of %" PRIu64
              " bytes (%.1f MiB admitted: %s)%s",
              ledger_->name().c_str(), what, bytes, device_, budget, mib(bytes_of(admitted)),
              n ? holders : "nobody", asked);
}

vpmm_status LedgerMember::admit(uint64_t bytes) {
  if (!bytes) return VPMM_OK;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const uint64_t drawn = credit_ < bytes ? credit_ : bytes;
    if (drawn == bytes) break;
    vpmm_status st = admit_shared(lock, bytes - drawn, "growth");
    if (st != VPMM_OK) return st;
    if (credit_ >= drawn) {
      credit_ += bytes - drawn;  // admitted: the growth draws it below with the rest
      break;
    }
    // Another thread drew the credit while an ask waited without the lock:
    // what was admitted becomes credit, and the growth draws again.
    credit_ += bytes - drawn;
  }
  credit_ -= bytes;
  mapped_ += bytes;
  show();
  return VPMM_OK;
}

void LedgerMember::lower(uint64_t bytes) {
  if (bytes > charge_) bytes = charge_;
  if (publish(charge_ - bytes)) charge_ -= bytes;
}

void LedgerMember::give_back(uint64_t bytes) {
  if (!bytes) return;
  std::lock_guard<std::mutex> lock(mu_);
  mapped_ -= bytes < mapped_ ? bytes : mapped_;
  lower(bytes);
  show();
}

vpmm_status LedgerMember::reserve_credit(uint64_t bytes) {
  if (!bytes) return VPMM_OK;
  std::unique_lock<std::mutex> lock(mu_);
  vpmm_status st = admit_shared(lock, bytes, "reservation");
  if (st != VPMM_OK) return st;
  credit_ += bytes;
  show();
  return VPMM_OK;
}

void LedgerMember::give_back_credit(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t g = credit_ < bytes ? credit_ : bytes;
  credit_ -= g;
  lower(g);
  show();
}

}  // namespace ledger
}  // namespace vpmm
