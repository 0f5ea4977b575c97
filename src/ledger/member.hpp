// LedgerMember: one pool's membership of a ledger (docs/ledger.md), the
// Admission the pool asks before it creates physical memory. It owns its
// slot: it is the only writer of the slot's charge, which it changes by
// compare-and-swap against what it last wrote, so a slot someone else
// rewrote is noticed (the member then admits nothing more).
//
// Admission publishes the new charge first, then sums the device's slots:
// of two racing members at least one sees both charges, so none admits past
// the budget. Growths draw first on the credit reservations admitted.
//
// Pressure (docs/ledger.md, "Pressure between members"): an admission the
// budget refuses posts a request and waits for the other members of the
// device to give memory back; each member's watcher thread (start_watcher)
// sees the request within a few milliseconds, marks it taken and runs its
// responder (the C API's: the pressure callback, trim, then the evictable
// tags paused in their order). A member that has not taken the request
// within kPressureWaitMs is not waited for; one that took it is, until it
// answers or kAnsweringWaitMs passed.
//
// Thread safe (a private mutex orders this member's own admissions; other
// members are other slots). Destroying it stops the watcher and leaves the
// ledger: the slot and whatever it still held go back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/state/admission.hpp"
#include "ledger/ledger.hpp"

namespace vpmm {
namespace ledger {

struct JoinRequest {
  const char* name = nullptr;
  // The device, by its identity: 16 bytes the same in every process
  // whatever its ordinal there (the backend's device_id). The ledger keys
  // its devices by it (Ledger::device_index). Null: by the ordinal `device`
  // (tests, and callers that know all members number devices alike).
  const uint8_t* device_id = nullptr;
  uint32_t device = 0;  // the device's ordinal in this process (shown in the slot)
  uint64_t device_total = 0;     // the device's memory (for a fraction, and the default budget)
  uint64_t budget_bytes = 0;     // budget if this member sets it first; 0 = the fraction's
  double budget_fraction = 0.0;  // of device_total; 0 = the whole device
};

class LedgerMember final : public Admission {
 public:
  static vpmm_status join(const char* call, const JoinRequest& req, std::unique_ptr<LedgerMember>* out);
  ~LedgerMember() override;
  LedgerMember(const LedgerMember&) = delete;
  LedgerMember& operator=(const LedgerMember&) = delete;

  vpmm_status admit(uint64_t bytes) override;
  void give_back(uint64_t bytes) override;
  vpmm_status reserve_credit(uint64_t bytes) override;
  void give_back_credit(uint64_t bytes) override;

  Ledger& ledger() { return *ledger_; }
  uint32_t slot() const { return slot_; }
  // Tests only: runs between an admission's claim and its look at the
  // others (where a racing member's whole admission may fall).
  void set_race_point_for_tests(std::function<void()> f) { race_point_ = std::move(f); }

  // What answers the other members' requests: called on the watcher
  // thread with the bytes asked for, without any of this member's locks.
  using Responder = std::function<void(uint64_t bytes)>;
  void start_watcher(Responder r);
  // Joins the watcher (before the pool it answers for goes).
  void stop_watcher();
  // The tags to pause under pressure, in order (shown in the slot).
  void set_evictable(std::vector<std::string> tags);
  std::vector<std::string> evictable();
  uint64_t charge();

  // The host budget (backups in pinned and mmap memory): OUT_OF_MEMORY
  // when `bytes` more than this member holds would pass it (an unset host
  // budget admits anything); `call` names the public function.
  vpmm_status admit_host(const char* call, uint64_t bytes);
  // What the pool's backups hold now (host bytes, and backup bytes shown).
  void set_host_held(uint64_t host_bytes, uint64_t backed_up);
  // The stores the member allowed its pauses when the host budget refuses
  // them (VPMM_LEDGER_FALLBACK_*; the C API acts on it, the ledger keeps it).
  void set_fallback(uint32_t flags) { fallback_.store(flags); }
  uint32_t fallback() const { return fallback_.load(); }

 private:
  LedgerMember(std::unique_ptr<Ledger> l, uint32_t device, uint32_t slot, uint64_t owner)
      : ledger_(std::move(l)), device_(device), slot_(slot), owner_(owner) {}
  // Admits `bytes` more against the budget (mu_ held).
  vpmm_status admit_shared(std::unique_lock<std::mutex>& lock, uint64_t bytes, const char* what);
  // Writes the charge `bytes` into the slot by CAS; false (and broken_)
  // when the slot is not as this member left it.
  bool publish(uint64_t bytes);
  void lower(uint64_t bytes);  // mu_ held
  void show();                 // the shown-only figures (mu_ held)
  vpmm_status refuse_broken(const char* what, uint64_t bytes);

  std::mutex mu_;
  std::unique_ptr<Ledger> ledger_;
  uint32_t device_ = 0;
  uint32_t slot_ = 0;
  uint64_t owner_ = 0;
  uint64_t charge_ = 0;  // bytes admitted: mapped_ + credit_
  uint64_t credit_ = 0;  // admitted for reservations, not yet drawn on
  uint64_t mapped_ = 0;
  uint64_t word_ = 0;    // the charge word as this member last wrote it
  uint64_t host_charge_ = 0, host_word_ = 0;  // the same for the host charge
  bool publish_host(uint64_t bytes);
  uint64_t n_admissions_ = 0, n_refused_ = 0, wait_ns_ = 0;
  bool broken_ = false;
  std::function<void()> race_point_;
  // Asks the others and waits (lock held on entry and exit, dropped while
  // waiting); OK once `bytes` were admitted.
  vpmm_status ask_others(std::unique_lock<std::mutex>& lock, uint64_t bytes, const char* what);
  // One admission attempt round (the claim-look protocol with its retries).
  vpmm_status try_admit(uint64_t bytes, DeviceSum* sum, uint64_t* budget, bool* budget_ok);
  vpmm_status refuse(const char* what, uint64_t bytes, DeviceSum& sum, uint64_t budget, bool budget_ok,
                     const char* asked);
  void watch();
  uint64_t n_asked_ = 0, n_answered_ = 0;
  std::vector<std::string> tags_;
  Responder responder_;
  std::thread watcher_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool stopping_ = false;
  std::atomic<uint32_t> fallback_{0};
};

}  // namespace ledger
}  // namespace vpmm
