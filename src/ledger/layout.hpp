// The ledger segment's layout (docs/ledger.md, "Segment layout"): what lies
// in /dev/shm/vpmm.ledger.NAME, shared by every member. Nothing in it is
// trusted: a reader validates every field it uses (the header's constants
// and check word, each slot's identity check, each checked word).
//
// Every field is a 64-bit lock-free atomic, which is address-free and so
// valid across processes that map the segment at different addresses.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vpmm {
namespace ledger {

constexpr uint64_t kMagic = 0x3147444c6d6d7076ull;  // "vpmmLDG1" as little-endian bytes
// 2: devices keyed by identity (the header's device table), not ordinal.
// Words appended since (the device table's identities, a slot's ordinal)
// lie where earlier version-2 members keep zeros and never look, and are
// shown only, so members of both share a ledger: no new version.
constexpr uint64_t kVersion = 2;
constexpr uint32_t kSlots = 64;
constexpr uint32_t kDevices = 16;
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kSlotBytes = 256;
constexpr uint64_t kSegmentBytes = kHeaderBytes + kSlots * kSlotBytes;
constexpr uint64_t kUnit = 4096;  // the unit of checked words' values
constexpr size_t kTagsBytes = 96;

using Word = std::atomic<uint64_t>;
static_assert(Word::is_always_lock_free, "the ledger needs lock-free 64-bit atomics");

struct Header {
  // Immutable once the magic is published.
  Word magic;
  Word version;
  Word header_bytes;
  Word segment_bytes;
  Word slots;
  Word devices;
  Word nonce;
  Word creator_pid;
  Word check;  // header_check() of the fields above
  // Mutable, checked words (field ids kBudgetField + device, kHostBudgetField).
  Word budget[kDevices];
  Word host_budget;
  Word pressure_seq;  // counts pressure requests; the latest is the one members answer
  // The latest request (hints: a member answering garbage gives memory back
  // for nothing, nothing worse): device, bytes wanted, the asking slot.
  Word pressure_device;
  Word pressure_bytes;
  Word pressure_slot;
  // The device table: entry i is the device of the ledger's index i (the
  // index budget[] and every slot's device use), as a checked word whose
  // value is a 40-bit key of the device's identity (device_key: the
  // backend's 16-byte device id, the same in every process whatever the
  // device's ordinal there). 0 = not taken; taken by CAS, never changed.
  Word device_key[kDevices];
  // Appended within version 2 (earlier members leave them zero and never
  // read them): the 16 bytes of entry i's identity, for showing only, as
  // two words (id_to_words) each xor'ed with id_mask(), so that an identity
  // of zero bytes is not 0, "not written". Written by CAS from 0 by the
  // member that took the entry, or by any later joiner of its device that
  // finds them unwritten (an entry an earlier libvpmm made). A reader
  // believes them only when their device_key() is the entry's key.
  Word device_id[kDevices][2];
};
static_assert(sizeof(Header) <= kHeaderBytes, "header fits its page");

// Owner word: state (bits 62-63), generation (bits 32-61), pid (bits 0-31).
enum SlotState : uint64_t { kFree = 0, kClaiming = 1, kActive = 2, kReclaiming = 3 };

struct Slot {
  Word owner;
  Word start_time;  // /proc/PID/stat field 22 of the owner
  Word device;
  Word ident;       // slot_ident() of owner, start time and device
  Word charge;      // checked word: bytes admitted (mapped + reserved credit)
  Word pending;     // a claim in flight (kClaimIn*): a hint for racing admitters, a flag for readers
  Word host_charge; // checked word: host bytes admitted for backups
  // Shown only: clamped when read, never used to admit.
  Word mapped;
  Word reserved;
  Word backed_up;
  Word n_admissions;
  Word n_refused;
  Word wait_ns;
  Word n_pressure_asked;
  Word n_pressure_answered;
  Word heartbeat_ns;
  Word pressure_answered;  // the latest request this member answered
  Word tags[kTagsBytes / 8];  // the evictable tags, "a,b", NUL-terminated if shorter
  // Appended within version 2 (a member of an earlier libvpmm leaves it as
  // it found it): a checked word (field ordinal_field, with the generation)
  // of the member's own device ordinal + 1, as its process numbers the
  // device (vpmm_config.device); 0 = not recorded. Shown only: never an
  // index, never used to admit.
  Word ordinal;
  // Appended within version 2 (an earlier member leaves it zero): the latest
  // request this member's watcher took and is answering now. An asker waits
  // longer for a member that took its request (it is giving memory back)
  // than for one that has not looked (stopped, busy or gone).
  Word pressure_taken;
};
static_assert(sizeof(Slot) <= kSlotBytes, "slot fits its stride");

struct Segment {
  Header header;
  char header_pad[kHeaderBytes - sizeof(Header)];
  struct alignas(8) PaddedSlot {
    Slot s;
    char pad[kSlotBytes - sizeof(Slot)];
  } slots[kSlots];
};
static_assert(sizeof(Segment) == kSegmentBytes, "segment layout");

inline uint64_t owner_word(SlotState st, uint64_t gen, uint32_t pid) {
  return (uint64_t(st) << 62) | ((gen & ((1ull << 30) - 1)) << 32) | pid;
}
inline SlotState owner_state(uint64_t w) { return static_cast<SlotState>(w >> 62); }
inline uint64_t owner_gen(uint64_t w) { return (w >> 32) & ((1ull << 30) - 1); }
inline uint32_t owner_pid(uint64_t w) { return static_cast<uint32_t>(w); }

inline uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Checked words: a value in kUnit units (40 bits) and a 24-bit hash of the
// value, the field and the segment's nonce; garbage passes 1 in 2^24.
constexpr uint64_t kMaxUnits = (1ull << 40) - 1;
// A slot's pending word while its member claims (docs/ledger.md, "Admission:
// no lock"): the units it claims, and, once its charge word (or host charge
// word) holds them, a flag saying which. Admission only asks whether it is
// nonzero (another member is claiming: a refusal may be a race both lost);
// a reader subtracts a flagged claim and waits out an unflagged one, so that
// vpmm_ledger_read never shows as admitted the bytes of a claim that may
// still be taken back (claim-then-look admits nobody past the budget, but
// its charge words pass it for the microseconds a refused claim takes).
constexpr uint64_t kClaimInCharge = 1ull << 62, kClaimInHostCharge = 1ull << 61;
inline uint64_t claim_units(uint64_t pending) { return pending & kMaxUnits; }
constexpr uint64_t kBudgetField = 1ull << 20;
constexpr uint64_t kHostBudgetField = (1ull << 20) + 0xff;
constexpr uint64_t kDeviceKeyField = (1ull << 21);  // + the index
inline uint64_t charge_field(uint32_t slot) { return (uint64_t(slot) << 8) | 1; }
inline uint64_t host_charge_field(uint32_t slot) { return (uint64_t(slot) << 8) | 2; }
inline uint64_t ordinal_field(uint32_t slot) { return (uint64_t(slot) << 8) | 3; }

inline uint64_t word_hash(uint64_t units, uint64_t field, uint64_t nonce) {
  return mix(units ^ mix(field ^ nonce)) & 0xffffff;
}
inline uint64_t encode_units(uint64_t units, uint64_t field, uint64_t nonce) {
  if (units > kMaxUnits) units = kMaxUnits;
  return (units << 24) | word_hash(units, field, nonce);
}
inline bool decode_units(uint64_t w, uint64_t field, uint64_t nonce, uint64_t* units) {
  const uint64_t u = w >> 24;
  if ((w & 0xffffff) != word_hash(u, field, nonce)) return false;
  *units = u;
  return true;
}
inline uint64_t units_up(uint64_t bytes) { return bytes / kUnit + (bytes % kUnit != 0); }
inline uint64_t units_down(uint64_t bytes) { return bytes / kUnit; }
inline uint64_t bytes_of(uint64_t units) { return units * kUnit; }

// A device's key in the table: 40 bits of a hash of its 16-byte identity
// (never 0). Two devices of one ledger share a key 1 in 2^40 times.
inline uint64_t device_key(const uint8_t id[16]) {
  uint64_t lo = 0, hi = 0;
  for (int i = 0; i < 8; ++i) {
    lo |= uint64_t(id[i]) << (8 * i);
    hi |= uint64_t(id[8 + i]) << (8 * i);
  }
  const uint64_t k = mix(lo ^ mix(hi ^ 0xde71ce)) & kMaxUnits;
  return k ? k : 1;
}

// The identity as two numbers: bytes 0-7 big-endian (hi), bytes 8-15 (lo),
// so that hi then lo in hex read as the bytes do (a UUID's text).
inline void id_to_words(const uint8_t id[16], uint64_t* hi, uint64_t* lo) {
  *hi = *lo = 0;
  for (int i = 0; i < 8; ++i) {
    *hi = (*hi << 8) | id[i];
    *lo = (*lo << 8) | id[8 + i];
  }
}
inline void words_to_id(uint64_t hi, uint64_t lo, uint8_t id[16]) {
  for (int i = 7; i >= 0; --i) {
    id[i] = static_cast<uint8_t>(hi);
    id[8 + i] = static_cast<uint8_t>(lo);
    hi >>= 8;
    lo >>= 8;
  }
}
// The mask of word k (0: hi, 1: lo) of device table entry `index`'s identity.
constexpr uint64_t kDeviceIdField = (1ull << 22);
inline uint64_t id_mask(uint64_t nonce, uint32_t index, uint32_t k) {
  return mix(nonce ^ mix(kDeviceIdField + 2 * uint64_t(index) + k));
}

inline uint64_t header_check(uint64_t nonce, uint64_t creator_pid) {
  return mix(kMagic ^ mix(kVersion ^ mix(kHeaderBytes ^ mix(kSegmentBytes ^ mix(kSlots ^ mix(kDevices ^ mix(nonce ^ mix(creator_pid))))))));
}
inline uint64_t slot_ident(uint64_t owner, uint64_t start_time, uint64_t device, uint64_t nonce) {
  return mix(owner ^ mix(start_time ^ mix(device ^ mix(nonce ^ 0x5107))));
}

}  // namespace ledger
}  // namespace vpmm
