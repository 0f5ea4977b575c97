// Ledger: one process's mapping of a ledger segment (layout.hpp), and what
// any process does with it: create or join it by name, read and set the
// budgets, claim and free member slots, sum what a device's members hold,
// and reclaim the slots of processes that are gone (docs/ledger.md).
//
// The segment is not trusted: open() refuses one that is not a regular file
// of this user with mode 0600 and the layout's size, or whose header fails
// its check; scan() and members() validate every slot they use. There is no
// lock: each member writes only its own slot (member.hpp), reclaimers move
// a dead slot through its owner word with compare-and-swap.
//
// Thread safe: every method only reads or CASes the shared words.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ledger/layout.hpp"
#include "vpmm.h"

namespace vpmm {
namespace ledger {

// One slot as a reader sees it (members(), the C API's vpmm_ledger_read).
struct MemberView {
  uint32_t slot = 0;
  uint32_t pid = 0;
  uint32_t device = 0;   // the ledger's index (kDevices: unreadable)
  // Its own device ordinal: kOrdinalNotRecorded (a member of an earlier
  // libvpmm), kOrdinalUnreadable (the word fails its check).
  int32_t ordinal = -1;
  bool corrupt = false;  // fails its checks: its figures are not to be believed
  uint64_t charge = 0, host_charge = 0;  // bytes admitted (device, host)
  uint64_t mapped = 0, reserved = 0, backed_up = 0;
  uint64_t n_admissions = 0, n_refused = 0, wait_ns = 0;
  uint64_t n_pressure_asked = 0, n_pressure_answered = 0, heartbeat_ns = 0;
  std::string tags;  // evictable tags, printable characters only
};

constexpr int32_t kOrdinalNotRecorded = -1;  // = VPMM_LEDGER_ORDINAL_NOT_RECORDED
constexpr int32_t kOrdinalUnreadable = -2;   // = VPMM_LEDGER_ORDINAL_UNREADABLE

// What a device table entry's identity words say (= VPMM_LEDGER_ID_*).
enum class IdState : uint32_t { kOk = 0, kNotRecorded = 1, kUnreadable = 2, kNoDevice = 3 };

// What the active slots of one device hold, for an admission.
struct DeviceSum {
  uint64_t units = 0;          // saturating sum of the charges
  bool others_pending = false; // another slot was claiming bytes meanwhile
  int corrupt_slot = -1;       // a slot that failed its checks (admission refuses)
  const char* corrupt_why = nullptr;
  struct Holder {
    uint32_t pid;
    uint32_t slot;
    uint64_t units;
  };
  std::vector<Holder> holders;  // the largest few, for the refusal's message
};

class Ledger {
 public:
  // A name is 1-64 characters of [A-Za-z0-9_.-] not starting with '.'.
  static bool valid_name(const char* name);
  // Opens ledger `name`, creating it when `create` and it does not exist
  // (*created then true). `call` names the public function in errors.
  static vpmm_status open(const char* call, const char* name, bool create, std::unique_ptr<Ledger>* out,
                          bool* created = nullptr);
  // shm_unlink of the ledger's name: members that mapped it keep theirs.
  static vpmm_status remove(const char* call, const char* name);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  const std::string& name() const { return name_; }
  uint64_t nonce() const { return nonce_; }
  Slot& slot(uint32_t i) { return seg_->slots[i].s; }
  // The immutable header still says what it said when this process joined.
  bool header_ok() const;

  // --- budgets (bytes; device < kDevices) ---------------------------------
  // False when the word is corrupt; *set false when nobody set it yet.
  bool budget(uint32_t device, uint64_t* bytes, bool* set) const;
  void set_budget(uint32_t device, uint64_t bytes);
  // Sets the budget only if nobody did yet.
  void init_budget(uint32_t device, uint64_t bytes);
  bool host_budget(uint64_t* bytes, bool* set) const;
  void set_host_budget(uint64_t bytes);
  void init_host_budget(uint64_t bytes);
  // Posts a pressure request for `bytes` on `device` from `slot`; its number.
  uint64_t ask(uint32_t device, uint64_t bytes, uint32_t slot) {
    Header& h = seg_->header;
    h.pressure_device.store(device);
    h.pressure_bytes.store(bytes);
    h.pressure_slot.store(slot);
    return h.pressure_seq.fetch_add(1) + 1;
  }
  uint64_t pressure_requests() const { return seg_->header.pressure_seq.load(); }
  struct Request {
    uint64_t seq, device, bytes, slot;
  };
  Request request() const {
    const Header& h = seg_->header;
    return {h.pressure_seq.load(), h.pressure_device.load(), h.pressure_bytes.load(), h.pressure_slot.load()};
  }
  // Active members of `device` other than `self`, how many of them answered
  // request `seq` (or a later one), and how many took it and are answering
  // it now (a stopped or busy member does neither).
  void answers(uint32_t device, uint32_t self, uint64_t seq, uint32_t* others, uint32_t* answered,
               uint32_t* answering);

  // --- devices --------------------------------------------------------------
  // The ledger's index of the device whose key is `key` (layout.hpp,
  // device_key), taking the first free entry of the device table if the
  // device is new. UNSUPPORTED when kDevices other devices have entries,
  // WRONG_STATE when an entry fails its check (nothing is guessed: a
  // device given a second index would get a second budget).
  vpmm_status device_index(const char* call, uint64_t key, uint32_t* index);
  // Writes the identity of entry `index` (whose key is device_key(id)) if
  // nobody did yet (layout.hpp: Header::device_id).
  void record_device_id(uint32_t index, const uint8_t id[16]);
  // The identity of entry `index` into out (zeroes unless kOk): kNoDevice
  // when no device took the entry, kNotRecorded when its words are not
  // written, kUnreadable when the entry or its words fail their checks.
  IdState device_id(uint32_t index, uint8_t out[16]) const;
  // How many device table entries are taken (sound or not).
  uint32_t n_devices() const;

  // --- slots ----------------------------------------------------------------
  // Claims a free slot (reclaiming dead ones if none is free) as this
  // process's, active for `device` (the ledger's index) and showing
  // `ordinal` (the device's ordinal in this process); *owner is its owner word.
  vpmm_status claim(const char* call, uint32_t device, uint32_t ordinal, uint32_t* slot, uint64_t* owner);
  // Frees this process's slot `slot` if its owner word is still `owner`.
  void leave(uint32_t slot, uint64_t owner);
  // What the slots of `device` hold (host: the host charges of every slot
  // when `host`), reclaiming dead members on the way. `self`: the caller's
  // slot, whose pending claim is its own.
  DeviceSum scan(uint32_t device, bool host, int self = -1);
  // Every slot in use, reclaiming dead members on the way.
  std::vector<MemberView> members();

 private:
  Ledger(std::string name, int fd, Segment* seg, uint64_t nonce, uint64_t creator)
      : name_(std::move(name)), fd_(fd), seg_(seg), nonce_(nonce), creator_(creator) {}
  // Reclaims slot i if its owner is gone and the slot can be trusted to
  // hold what its words say; true when the slot is free afterwards.
  bool reclaim_if_dead(uint32_t i, uint64_t owner);
  // Whether slot i's identity check holds for `owner`.
  bool ident_ok(uint32_t i, uint64_t owner);

  std::string name_;
  int fd_ = -1;
  Segment* seg_ = nullptr;
  uint64_t nonce_ = 0;
  uint64_t creator_ = 0;
};

}  // namespace ledger
}  // namespace vpmm
