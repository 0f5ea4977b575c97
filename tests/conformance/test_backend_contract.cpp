// The backend conformance suite: the contract of backend/backend.hpp, written
// once against the Backend interface and run against every target of
// targets.cpp (host, host wrapped in the fault-injecting backend, CUDA; the
// HIP emulator joins with one row there). It checks behaviour, not
// bookkeeping: bytes written through one VA are read through another, events
// stay pending while their stream is held, and every live counter returns to
// zero. Where backends legitimately differ (a real driver leaves some misuse
// undefined) the case reads its target's row: see target.hpp.
//
//   test_backend_contract TARGET [CASE-FILTER]
//
// Prints "N passed, N failed" (tests/unit/check.hpp); exits 77 (meson: SKIP)
// with "SKIP: ..." when the target's backend is not usable here (no GPU, or
// not compiled in), so the CUDA instance lives in the GPU suite and skips on
// CPU-only machines.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "backend/host_services/host_services.hpp"
#include "support/fault_backend.hpp"
#include "backend/registry.hpp"
#include "backend_counters.hpp"
#include "check.hpp"
#include "status_check.hpp"
#include "common/status.hpp"
#include "target.hpp"

using conformance::target;
using vpmm::Backend;
using vpmm::EventHandle;
using vpmm::PhysHandle;
using vpmm::Stream;

namespace {

// ---- status checks (CHECK_ST, CHECK_ERR_HAS: status_check.hpp) -----------------

// A call every driver refuses: strict targets give exactly `want`, the others
// any failure; a message always.
#define CHECK_REFUSED(expr, want)                                                          \
  do {                                                                                     \
    vpmm::fail(VPMM_OK, "%s", "");                                                         \
    vpmm_status st_ = (expr);                                                              \
    bool ok_ = target().strict ? st_ == (want) : st_ != VPMM_OK;                           \
    if (!(ok_ && vpmm::last_error()[0] != '\0')) {                                         \
      vt::report_fail(__FILE__, __LINE__, #expr " refused (" #want ")");                   \
      std::printf("       got %d, last error: %s\n", st_, vpmm::last_error());             \
    }                                                                                      \
  } while (0)

bool strict() { return target().strict; }

std::unique_ptr<Backend> make() {
  vpmm_status st = VPMM_ERR_INTERNAL;
  std::unique_ptr<Backend> b = conformance::make_backend(&st);
  CHECK_MSG(st == VPMM_OK && b != nullptr, "make_backend(%s): %d %s", target().name, st,
            vpmm::last_error());
  return b;
}

// ---- bytes in pool memory ------------------------------------------------------
// In place where the CPU addresses pool VAs (the real mapping is what is
// tested), else through the backend's own copies on the default stream.

char* at(uint64_t va) { return reinterpret_cast<char*>(static_cast<uintptr_t>(va)); }

bool write_bytes(Backend& b, uint64_t va, const void* src, uint64_t n) {
  if (target().cpu_addressable) {
    std::memcpy(at(va), src, n);
    return true;
  }
  return b.copy_h2d(va, src, n, nullptr) == VPMM_OK && b.stream_sync(nullptr) == VPMM_OK;
}

bool read_bytes(Backend& b, uint64_t va, void* dst, uint64_t n) {
  if (target().cpu_addressable) {
    std::memcpy(dst, at(va), n);
    return true;
  }
  return b.copy_d2h(dst, va, n, nullptr) == VPMM_OK && b.stream_sync(nullptr) == VPMM_OK;
}

std::vector<char> pattern(uint64_t n, int seed) {
  std::vector<char> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<char>(i * 7 + seed);
  return v;
}

bool reads_as(Backend& b, uint64_t va, const std::vector<char>& want) {
  std::vector<char> got(want.size(), 0);
  return read_bytes(b, va, got.data(), got.size()) && got == want;
}

// ---- the contract ----------------------------------------------------------------

TEST("identity: static facts, and the registry entry that made the backend") {
  auto b = make();
  if (!b) return;
  const uint64_t g = b->granularity();
  CHECK(g > 0 && (g & (g - 1)) == 0);
  CHECK(b->recommended_page_size() >= g && b->recommended_page_size() % g == 0);
  CHECK(b->default_va_size() > 0 && b->default_va_size() % g == 0);
  CHECK(b->max_handle_size() % g == 0);  // 0 = no cap
  CHECK_EQ(b->device(), 0);
  CHECK_EQ(b->capabilities() & ~(vpmm::kCapDeviceCopy | vpmm::kCapPinnedHost | vpmm::kCapMemInfo),
           0u);
  CHECK_EQ(b->kind(), target().kind);
  if (target().backend_name) CHECK_EQ(std::string(b->name()), std::string(target().backend_name));
  if (target().default_va_size) CHECK_EQ(b->default_va_size(), target().default_va_size);
  CHECK_EQ(b->capabilities(), target().capabilities);
  CHECK_EQ(b->max_handle_size(), target().max_handle_size);
  const vpmm::BackendEntry* e = vpmm::find_backend_entry(b->kind());
  CHECK(e != nullptr);
  if (e) {
    CHECK_EQ(std::string(e->name), std::string(b->name()));
    CHECK(e->usable());
    // The host-stream extension is the host backend's alone.
    CHECK_EQ(e->host_streams != nullptr, b->kind() == VPMM_BACKEND_HOST);
  }
}

// The registry itself: the host entry is compiled in, last in AUTO order (its
// probe always succeeds, so AUTO never fails for want of a GPU), and carries
// the host-stream extension; every entry's backend reports its entry's kind.
TEST("registry: AUTO order, unknown kinds, kinds not compiled in") {
  size_t n = 0;
  const vpmm::BackendEntry* const* entries = vpmm::backend_entries(&n);
  CHECK(n >= 1);
  if (n == 0) return;
  const vpmm::BackendEntry* last = entries[n - 1];
  CHECK_EQ(last->kind, VPMM_BACKEND_HOST);
  CHECK_EQ(std::string(last->name), std::string("host"));
  CHECK(last->usable());
  CHECK(last->host_streams != nullptr);
  CHECK(vpmm::find_backend_entry(VPMM_BACKEND_HOST) == last);
  CHECK(vpmm::find_backend_entry(VPMM_BACKEND_AUTO) == nullptr);
  for (size_t i = 0; i + 1 < n; ++i) {
    CHECK(entries[i]->kind != VPMM_BACKEND_HOST);
    CHECK(entries[i]->host_streams == nullptr);
  }
  vpmm_status st = VPMM_OK;
  CHECK(vpmm::make_backend(99, vpmm::BackendParams{}, &st) == nullptr);
  CHECK_EQ(st, VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ERR_HAS("not a VPMM_BACKEND_* value");
  if (vpmm::find_backend_entry(VPMM_BACKEND_HIP) == nullptr) {
    CHECK(vpmm::make_backend(VPMM_BACKEND_HIP, vpmm::BackendParams{}, &st) == nullptr);
    CHECK_EQ(st, VPMM_ERR_UNSUPPORTED);
    CHECK_ERR_HAS("built without the HIP backend");
  }
  // Whatever AUTO picks reports the kind of an entry and the entry's name.
  std::unique_ptr<Backend> b = vpmm::make_backend(VPMM_BACKEND_AUTO, vpmm::BackendParams{}, &st);
  if (b) {
    const vpmm::BackendEntry* e = vpmm::find_backend_entry(b->kind());
    CHECK(e != nullptr && std::strcmp(e->name, b->name()) == 0);
  }
}

TEST("reserve: alignment and granularity; unreserve exactly and whole") {
  auto b = make();
  if (!b) return;
  const uint64_t G = b->granularity();
  const uint64_t align = std::max<uint64_t>(1 << 20, 4 * G);
  uint64_t va = 0;
  CHECK_ST(b->reserve(16 * G, align, &va), VPMM_OK);
  CHECK(va != 0 && va % align == 0);
  uint64_t va2 = 0;
  CHECK_ST(b->reserve(16 * G, 0, &va2), VPMM_OK);
  CHECK(va2 != 0 && va2 % G == 0);
  // Sizes are non-zero multiples of the granularity (checked by every backend's public face).
  uint64_t none = 0;
  CHECK_ST(b->reserve(G + 1, 0, &none), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ST(b->reserve(0, 0, &none), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(none, uint64_t(0));
  CHECK_EQ(b->counters().live_reservations.load(), int64_t(2));

  if (strict()) {
    CHECK_ST(b->reserve(16 * G, 3 * G, &none), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("alignment");
    CHECK_EQ(none, uint64_t(0));
    // A reservation is released exactly and whole.
    CHECK_ST(b->unreserve(va, 8 * G), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("host unreserve");
    CHECK_ST(b->unreserve(va + G, 15 * G), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("is not the start of a reservation");
    // Not while something is mapped inside.
    PhysHandle h = 0;
    CHECK_ST(b->create(G, &h), VPMM_OK);
    CHECK_ST(b->map(va + 4 * G, G, h), VPMM_OK);
    CHECK_ST(b->unreserve(va, 16 * G), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("still has a mapping");
    CHECK_ST(b->unmap(va + 4 * G, G), VPMM_OK);
    CHECK_ST(b->release(h, G), VPMM_OK);
    CHECK_EQ(b->counters().live_reservations.load(), int64_t(2));
  }
  CHECK_ST(b->unreserve(va, 16 * G), VPMM_OK);
  CHECK_ST(b->unreserve(va2, 16 * G), VPMM_OK);
  if (strict()) CHECK_ST(b->unreserve(va2, 16 * G), VPMM_ERR_INVALID_ARGUMENT);  // twice
  vt::check_counters_zero(*b);
}

TEST("map: a handle maps whole and unmaps whole; set_access covers whole mappings") {
  auto b = make();
  if (!b) return;
  const uint64_t G = b->granularity();
  uint64_t va = 0, other = 0;
  CHECK_ST(b->reserve(16 * G, 0, &va), VPMM_OK);
  CHECK_ST(b->reserve(16 * G, 0, &other), VPMM_OK);
  PhysHandle h4 = 0, h2 = 0, h2b = 0;
  CHECK_ST(b->create(4 * G, &h4), VPMM_OK);
  CHECK_ST(b->create(2 * G, &h2), VPMM_OK);
  CHECK_ST(b->create(2 * G, &h2b), VPMM_OK);
  CHECK(h4 != 0 && h2 != 0 && h2b != 0);
  CHECK_ST(b->create(G + 1, &h2b), VPMM_ERR_INVALID_ARGUMENT);  // granularity (public face)
  CHECK_ST(b->create(0, &h2b), VPMM_ERR_INVALID_ARGUMENT);

  // A handle maps whole: every driver refuses part of one.
  CHECK_REFUSED(b->map(va, 2 * G, h4), VPMM_ERR_UNSUPPORTED);
  if (strict()) CHECK_ERR_HAS("maps whole");
  CHECK_ST(b->map(va + 3, 4 * G, h4), VPMM_ERR_INVALID_ARGUMENT);  // unaligned (public face)
  CHECK_EQ(b->counters().live_mappings.load(), int64_t(0));
  if (strict()) {
    CHECK_ST(b->map(va, 8 * G, h4), VPMM_ERR_INVALID_ARGUMENT);  // more than the handle
    // Unknown handle; address outside any reservation; past the end.
    CHECK_ST(b->map(va, 4 * G, 987654321), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("not a live handle");
    uint64_t stray = 0;
    CHECK_ST(b->reserve(4 * G, 0, &stray), VPMM_OK);
    CHECK_ST(b->unreserve(stray, 4 * G), VPMM_OK);  // now surely not ours
    CHECK_ST(b->map(stray, 4 * G, h4), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("is not inside a reservation");
    CHECK_ST(b->map(va + 14 * G, 4 * G, h4), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("past the end");
  }

  // Overlap is refused (strict targets), adjacency is fine everywhere.
  CHECK_ST(b->map(va, 4 * G, h4), VPMM_OK);
  if (strict()) {
    CHECK_ST(b->map(va + 2 * G, 2 * G, h2), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("overlaps");
    CHECK_ST(b->map(va + 3 * G, 2 * G, h2), VPMM_ERR_INVALID_ARGUMENT);
  }
  CHECK_ST(b->map(va + 4 * G, 2 * G, h2), VPMM_OK);
  CHECK_ST(b->map(va + 8 * G, 2 * G, h2b), VPMM_OK);
  CHECK_EQ(b->counters().live_mappings.load(), int64_t(3));

  // set_access covers whole adjacent mappings only.
  if (strict()) {
    CHECK_ST(b->set_access(va, 3 * G), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("ends inside");
    CHECK_ST(b->set_access(va + G, 3 * G), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ST(b->set_access(va, 10 * G), VPMM_ERR_INVALID_ARGUMENT);  // gap at 6..8
    CHECK_ERR_HAS("not covered");
  }
  CHECK_ST(b->set_access(va, G + 1), VPMM_ERR_INVALID_ARGUMENT);  // granularity (public face)
  CHECK_ST(b->set_access(va, 6 * G), VPMM_OK);  // two adjacent mappings at once
  CHECK_ST(b->set_access(va + 8 * G, 2 * G), VPMM_OK);
  const std::vector<char> one(1, 1), two(1, 2);
  CHECK(write_bytes(*b, va, one.data(), 1));
  CHECK(write_bytes(*b, va + 6 * G - 1, two.data(), 1));  // last byte of the second mapping
  CHECK(reads_as(*b, va, one) && reads_as(*b, va + 6 * G - 1, two));

  // Partial unmap is refused by every driver; the counters do not move.
  CHECK_REFUSED(b->unmap(va, 2 * G), VPMM_ERR_INVALID_ARGUMENT);
  if (strict()) CHECK_ERR_HAS("unmapped whole");
  CHECK_ST(b->unmap(va + 1, 4 * G), VPMM_ERR_INVALID_ARGUMENT);  // unaligned (public face)
  CHECK_EQ(b->counters().live_mappings.load(), int64_t(3));
  if (strict()) {
    CHECK_ST(b->unmap(va + G, 3 * G), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("inside the mapping");
    CHECK_ST(b->unmap(va, 6 * G), VPMM_ERR_INVALID_ARGUMENT);  // two mappings: not one
    CHECK_ST(b->unmap(va + 12 * G, G), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("no mapping");
  }
  CHECK(reads_as(*b, va, one));  // refused calls changed nothing

  CHECK_ST(b->unmap(va, 4 * G), VPMM_OK);
  CHECK_ST(b->unmap(va + 4 * G, 2 * G), VPMM_OK);
  CHECK_ST(b->unmap(va + 8 * G, 2 * G), VPMM_OK);
  if (strict()) {
    CHECK_ST(b->unmap(va + 8 * G, 2 * G), VPMM_ERR_INVALID_ARGUMENT);  // twice
    CHECK_ST(b->release(h4, 2 * G), VPMM_ERR_INVALID_ARGUMENT);        // wrong size
  }
  CHECK_ST(b->release(h4, 4 * G), VPMM_OK);
  CHECK_ST(b->release(h2, 2 * G), VPMM_OK);
  CHECK_ST(b->release(h2b, 2 * G), VPMM_OK);
  CHECK_ST(b->unreserve(va, 16 * G), VPMM_OK);
  CHECK_ST(b->unreserve(other, 16 * G), VPMM_OK);
  vt::check_counters_zero(*b);
}

// Same handle at two VAs: one set of pages, two views; a handle released
// while mapped lives until its last unmap.
TEST("double mapping: one handle at two VAs shows the same bytes; release while mapped") {
  auto b = make();
  if (!b) return;
  const uint64_t G = b->granularity();
  const bool mem_info = (b->capabilities() & vpmm::kCapMemInfo) != 0;
  uint64_t va = 0;
  CHECK_ST(b->reserve(16 * G, 0, &va), VPMM_OK);
  uint64_t fr0 = 0, tot = 0;
  if (mem_info) CHECK_ST(b->mem_info(&fr0, &tot), VPMM_OK);
  PhysHandle h = 0;
  CHECK_ST(b->create(2 * G, &h), VPMM_OK);
  CHECK(h != 0);
  const uint64_t a = va, c = va + 8 * G;
  CHECK_ST(b->map(a, 2 * G, h), VPMM_OK);
  CHECK_ST(b->map(c, 2 * G, h), VPMM_OK);
  CHECK_ST(b->set_access(a, 2 * G), VPMM_OK);
  CHECK_ST(b->set_access(c, 2 * G), VPMM_OK);
  CHECK_EQ(b->counters().live_mappings.load(), int64_t(2));
  if (strict()) CHECK(reads_as(*b, a, std::vector<char>(2 * G, 0)));  // new memory reads as zeros

  const std::vector<char> pat = pattern(2 * G, 1);
  CHECK(write_bytes(*b, a, pat.data(), pat.size()));
  CHECK(reads_as(*b, c, pat));
  std::vector<char> back = pat;  // and back the other way
  back[100] = 42;
  const char b42 = 42;
  CHECK(write_bytes(*b, c + 100, &b42, 1));
  CHECK(reads_as(*b, a, back));
  CHECK(write_bytes(*b, a + 100, &pat[100], 1));

  // Unmap one view, release the handle: the other view keeps the memory.
  CHECK_ST(b->unmap(a, 2 * G), VPMM_OK);
  CHECK_ST(b->release(h, 2 * G), VPMM_OK);
  CHECK_EQ(b->counters().live_handles.load(), int64_t(0));
  CHECK(reads_as(*b, c, pat));
  uint64_t fr = 0;
  if (strict() && mem_info) {
    CHECK_ST(b->mem_info(&fr, &tot), VPMM_OK);
    CHECK_EQ(fr, fr0 - 2 * G);  // still physically held, as on CUDA
    // A released handle can no longer be mapped or released.
    CHECK_ST(b->map(a, 2 * G, h), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("released");
    CHECK_ST(b->release(h, 2 * G), VPMM_ERR_INVALID_ARGUMENT);
  }
  CHECK_ST(b->unmap(c, 2 * G), VPMM_OK);  // last mapping: memory goes back
  if (strict() && mem_info) {
    CHECK_ST(b->mem_info(&fr, &tot), VPMM_OK);
    CHECK_EQ(fr, fr0);
  }

  // A new handle at the same VA: strict targets poison recycled memory to zeros.
  PhysHandle h2 = 0;
  CHECK_ST(b->create(2 * G, &h2), VPMM_OK);
  CHECK_ST(b->map(a, 2 * G, h2), VPMM_OK);
  CHECK_ST(b->set_access(a, 2 * G), VPMM_OK);
  if (strict()) {
    CHECK(h2 != h);
    CHECK(reads_as(*b, a, std::vector<char>(2 * G, 0)));
  }
  CHECK_ST(b->unmap(a, 2 * G), VPMM_OK);
  CHECK_ST(b->release(h2, 2 * G), VPMM_OK);
  CHECK_ST(b->unreserve(va, 16 * G), VPMM_OK);
  vt::check_counters_zero(*b);
}

TEST("export: an exportable backend's handle, imported by another backend, is the same memory") {
  auto plain = make();
  if (!plain) return;
  const uint64_t G = plain->granularity();
  // A backend not made exportable refuses to export, whatever its driver.
  CHECK(!(plain->capabilities() & vpmm::kCapExport));
  PhysHandle ph = 0;
  CHECK_ST(plain->create(2 * G, &ph), VPMM_OK);
  int fd = -1;
  CHECK_ST(plain->export_handle(ph, 2 * G, &fd), VPMM_ERR_UNSUPPORTED);
  CHECK_ST(plain->release(ph, 2 * G), VPMM_OK);
  vpmm_status st = VPMM_ERR_INTERNAL;
  auto b = conformance::make_backend(&st, true);
  if (!b) {
    // A driver without export calls (the HIP emulator) refuses at creation.
    CHECK_EQ(st, VPMM_ERR_UNSUPPORTED);
    std::printf("    %s: no exportable backend here: %s\n", target().name, vpmm::last_error());
    vt::check_counters_zero(*plain);
    return;
  }
  CHECK(b->capabilities() & vpmm::kCapExport);
  uint64_t va = 0, va2 = 0;
  CHECK_ST(b->reserve(4 * G, 0, &va), VPMM_OK);
  PhysHandle h = 0;
  CHECK_ST(b->create(2 * G, &h), VPMM_OK);
  CHECK_ST(b->map(va, 2 * G, h), VPMM_OK);
  CHECK_ST(b->set_access(va, 2 * G), VPMM_OK);
  const std::vector<char> pat = pattern(2 * G, 5);
  CHECK(write_bytes(*b, va, pat.data(), pat.size()));
  CHECK_ST(b->export_handle(h, 2 * G, &fd), VPMM_OK);
  CHECK(fd >= 0);
  uint8_t id1[16], id2[16];
  CHECK_ST(b->device_id(id1), VPMM_OK);
  CHECK_ST(plain->device_id(id2), VPMM_OK);
  CHECK(std::memcmp(id1, id2, 16) == 0);  // one device, one identity
  // The importer: another backend (another process's, in effect).
  PhysHandle h2 = 0;
  CHECK_ST(plain->import_handle(fd, 2 * G, &h2), VPMM_OK);
  close(fd);  // the import does not need the descriptor any more
  CHECK_ST(plain->reserve(4 * G, 0, &va2), VPMM_OK);
  CHECK_ST(plain->map(va2, 2 * G, h2), VPMM_OK);
  CHECK_ST(plain->set_access(va2, 2 * G), VPMM_OK);
  CHECK(reads_as(*plain, va2, pat));
  const char x = 99;
  CHECK(write_bytes(*plain, va2 + 7, &x, 1));
  std::vector<char> back = pat;
  back[7] = 99;
  CHECK(reads_as(*b, va, back));
  // The exporter lets go: the importer's handle keeps the memory.
  CHECK_ST(b->unmap(va, 2 * G), VPMM_OK);
  CHECK_ST(b->release(h, 2 * G), VPMM_OK);
  CHECK(reads_as(*plain, va2, back));
  CHECK_ST(plain->unmap(va2, 2 * G), VPMM_OK);
  CHECK_ST(plain->release(h2, 2 * G), VPMM_OK);
  // What is no exported handle is refused.
  PhysHandle bad = 0;
  CHECK_ST(plain->import_handle(-1, 2 * G, &bad), VPMM_ERR_INVALID_ARGUMENT);
  int pipes[2];
  CHECK(pipe(pipes) == 0);
  CHECK_REFUSED(plain->import_handle(pipes[0], 2 * G, &bad), VPMM_ERR_INVALID_ARGUMENT);
  close(pipes[0]);
  close(pipes[1]);
  CHECK_ST(b->unreserve(va, 4 * G), VPMM_OK);
  CHECK_ST(plain->unreserve(va2, 4 * G), VPMM_OK);
  vt::check_counters_zero(*b);
  vt::check_counters_zero(*plain);
}

TEST("mem_info: free within total, as the capability says") {
  auto b = make();
  if (!b) return;
  if (!(b->capabilities() & vpmm::kCapMemInfo)) return;
  uint64_t fr = 0, tot = 0;
  CHECK_ST(b->mem_info(&fr, &tot), VPMM_OK);
  CHECK(tot > 0 && fr <= tot);
  // Out of memory is reported as such: far more than the device has.
  const uint64_t G = b->granularity();
  PhysHandle big = 0;
  CHECK_ST(b->create((tot * 4 / G + 1) * G, &big), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_EQ(big, PhysHandle(0));
  CHECK_EQ(b->counters().live_handles.load(), int64_t(0));
  vt::check_counters_zero(*b);
}

// Events of an idle stream complete; events behind a held stream stay
// pending, a GPU-side wait orders another stream after them, and everything
// completes once the stream is released.
TEST("events: record/query/sync, stream_wait orders a copy behind a held stream") {
  auto b = make();
  if (!b) return;
  const uint64_t G = b->granularity();
  EventHandle e0 = 0;
  CHECK_ST(b->event_record(nullptr, &e0), VPMM_OK);  // default stream
  CHECK(e0 != 0);
  CHECK_ST(b->event_sync(e0), VPMM_OK);
  bool done = false;
  CHECK_ST(b->event_query(e0, &done), VPMM_OK);
  CHECK(done);
  CHECK_ST(b->event_query(0, &done), VPMM_ERR_INVALID_ARGUMENT);  // 0 is never an event
  CHECK_ST(b->event_destroy(e0), VPMM_OK);
  if (strict()) {
    CHECK_ST(b->event_destroy(e0), VPMM_ERR_INVALID_ARGUMENT);  // twice
    CHECK_ST(b->event_query(12345, &done), VPMM_ERR_INVALID_ARGUMENT);
  }

  Stream s1 = nullptr, s2 = nullptr;
  CHECK_ST(b->stream_create(&s1), VPMM_OK);
  CHECK_ST(b->stream_create(&s2), VPMM_OK);
  uint64_t va = 0;
  PhysHandle h = 0;
  CHECK_ST(b->reserve(2 * G, 0, &va), VPMM_OK);
  CHECK_ST(b->create(2 * G, &h), VPMM_OK);
  CHECK_ST(b->map(va, 2 * G, h), VPMM_OK);
  CHECK_ST(b->set_access(va, 2 * G), VPMM_OK);
  const std::vector<char> pat = pattern(2 * G, 3);
  CHECK(write_bytes(*b, va, pat.data(), pat.size()));
  void* host = nullptr;
  CHECK_ST(b->host_alloc_pinned(2 * G, &host), VPMM_OK);

  if (target().hold && host != nullptr && target().hold(s1)) {
    std::memset(host, 0, 2 * G);
    EventHandle e1 = 0, e2 = 0;
    CHECK_ST(b->event_record(s1, &e1), VPMM_OK);  // completes only after the release
    done = true;
    CHECK_ST(b->event_query(e1, &done), VPMM_OK);
    CHECK(!done);
    CHECK_ST(b->stream_wait(s2, e1), VPMM_OK);  // GPU-side: the caller does not block
    CHECK_ST(b->copy_d2h(host, va, 2 * G, s2), VPMM_OK);  // ordered after s1's hold
    CHECK_ST(b->event_record(s2, &e2), VPMM_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    done = true;
    CHECK_ST(b->event_query(e2, &done), VPMM_OK);
    CHECK(!done);
    target().release(s1);
    CHECK_ST(b->event_sync(e2), VPMM_OK);
    CHECK_ST(b->event_query(e1, &done), VPMM_OK);
    CHECK(done);
    CHECK(std::memcmp(host, pat.data(), 2 * G) == 0);
    // Waiting on a completed event queues nothing.
    CHECK_ST(b->stream_wait(s2, e1), VPMM_OK);
    CHECK_ST(b->stream_sync(s1), VPMM_OK);
    CHECK_ST(b->stream_sync(s2), VPMM_OK);
    CHECK_ST(b->event_destroy(e1), VPMM_OK);
    CHECK_ST(b->event_destroy(e2), VPMM_OK);
  } else {
    std::printf("  (no way to hold a %s stream: pending-event checks skipped)\n", target().name);
  }
  if (strict()) CHECK_ST(b->stream_wait(s2, 777), VPMM_ERR_INVALID_ARGUMENT);
  if (host) CHECK_ST(b->host_free_pinned(host, 2 * G), VPMM_OK);
  CHECK_ST(b->unmap(va, 2 * G), VPMM_OK);
  CHECK_ST(b->release(h, 2 * G), VPMM_OK);
  CHECK_ST(b->unreserve(va, 2 * G), VPMM_OK);
  CHECK_ST(b->stream_destroy(s1), VPMM_OK);
  CHECK_ST(b->stream_destroy(s2), VPMM_OK);
  vt::check_counters_zero(*b);
}

TEST("copies: h2d and d2h across mappings, pinned and pageable, stream ordered") {
  auto b = make();
  if (!b) return;
  if (!(b->capabilities() & vpmm::kCapDeviceCopy)) return;
  const uint64_t G = b->granularity();
  Stream s = nullptr;
  CHECK_ST(b->stream_create(&s), VPMM_OK);
  uint64_t va = 0;
  CHECK_ST(b->reserve(8 * G, 0, &va), VPMM_OK);
  PhysHandle h1 = 0, h2 = 0;
  CHECK_ST(b->create(G, &h1), VPMM_OK);
  CHECK_ST(b->create(G, &h2), VPMM_OK);
  CHECK_ST(b->map(va, G, h1), VPMM_OK);
  CHECK_ST(b->map(va + G, G, h2), VPMM_OK);

  const std::vector<char> src = pattern(2 * G, 5);
  std::vector<char> dst(2 * G, 0);
  if (strict()) {
    // Not before set_access, not outside mappings, not on a bogus stream.
    CHECK_ST(b->copy_h2d(va, src.data(), 2 * G, s), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("set_access");
  }
  CHECK_ST(b->set_access(va, 2 * G), VPMM_OK);
  if (strict()) {
    CHECK_ST(b->copy_h2d(va, src.data(), 3 * G, s), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("host copy_h2d");
    CHECK_ST(b->copy_d2h(dst.data(), va + 4 * G, G, s), VPMM_ERR_INVALID_ARGUMENT);
    CHECK_ERR_HAS("not mapped");
    int bogus = 0;
    CHECK_ST(b->copy_d2h(dst.data(), va, G, &bogus), VPMM_ERR_INVALID_ARGUMENT);
  }

  // On a held stream the copy waits for the release: stream ordered. From
  // pinned memory: a driver may stage a pageable source synchronously, which
  // would wait for the held stream (CUDA does: cuMemcpyHtoDAsync blocks).
  void* pinned = nullptr;
  CHECK_ST(b->host_alloc_pinned(2 * G, &pinned), VPMM_OK);
  if (pinned == nullptr) return;
  std::memcpy(pinned, src.data(), 2 * G);
  if (target().hold && target().hold(s)) {
    CHECK_ST(b->copy_h2d(va, pinned, 2 * G, s), VPMM_OK);  // spans two mappings
    EventHandle e = 0;
    CHECK_ST(b->event_record(s, &e), VPMM_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    bool done = true;
    CHECK_ST(b->event_query(e, &done), VPMM_OK);
    CHECK(!done);
    target().release(s);
    CHECK_ST(b->event_sync(e), VPMM_OK);
    CHECK_ST(b->event_destroy(e), VPMM_OK);
  } else {
    CHECK_ST(b->copy_h2d(va, pinned, 2 * G, s), VPMM_OK);
    CHECK_ST(b->stream_sync(s), VPMM_OK);
  }
  CHECK(reads_as(*b, va, src));

  // From pageable memory too, on an idle stream (the driver may stage it).
  CHECK_ST(b->copy_h2d(va, src.data(), 2 * G, s), VPMM_OK);
  CHECK_ST(b->stream_sync(s), VPMM_OK);
  CHECK(reads_as(*b, va, src));
  // Back to pageable memory on the stream; after a sync it has landed.
  CHECK_ST(b->copy_d2h(dst.data(), va, 2 * G, s), VPMM_OK);
  CHECK_ST(b->stream_sync(s), VPMM_OK);
  CHECK(dst == src);
  // Into pinned memory on the default stream.
  {
    std::memset(pinned, 0, G);
    CHECK_ST(b->copy_d2h(pinned, va + G, G, nullptr), VPMM_OK);
    CHECK_ST(b->stream_sync(nullptr), VPMM_OK);
    CHECK(std::memcmp(pinned, src.data() + G, G) == 0);
    // And from pinned memory back (h2d), read through a pageable buffer.
    std::memset(pinned, 0x5a, G);
    CHECK_ST(b->copy_h2d(va, pinned, G, nullptr), VPMM_OK);
    CHECK_ST(b->stream_sync(nullptr), VPMM_OK);
    CHECK(reads_as(*b, va, std::vector<char>(G, 0x5a)));
    CHECK_ST(b->host_free_pinned(pinned, 2 * G), VPMM_OK);
  }
  // Pageable memory (the host's, as a backup store gets it).
  std::unique_ptr<vpmm::HostServices> host = vpmm::make_host_services();
  void* pageable = nullptr;
  CHECK_ST(host->host_alloc_pageable(G, &pageable), VPMM_OK);
  if (pageable) {
    std::memset(pageable, 0, G);
    CHECK_ST(b->copy_d2h(pageable, va + G, G, s), VPMM_OK);
    CHECK_ST(b->stream_sync(s), VPMM_OK);
    CHECK(std::memcmp(pageable, src.data() + G, G) == 0);
    CHECK_ST(host->host_free_pageable(pageable, G), VPMM_OK);
  }
  vt::check_counters_zero(*host);

  CHECK_ST(b->unmap(va, G), VPMM_OK);
  CHECK_ST(b->unmap(va + G, G), VPMM_OK);
  CHECK_ST(b->release(h1, G), VPMM_OK);
  CHECK_ST(b->release(h2, G), VPMM_OK);
  CHECK_ST(b->unreserve(va, 8 * G), VPMM_OK);
  CHECK_ST(b->stream_destroy(s), VPMM_OK);
  vt::check_counters_zero(*b);
}

TEST("host memory: pinned buffers, freed by their own call and size") {
  auto b = make();
  if (!b) return;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  void* p = nullptr;
  CHECK_ST(b->host_alloc_pinned(10000, &p), VPMM_OK);
  CHECK(p != nullptr && reinterpret_cast<uintptr_t>(p) % page == 0);
  if (p == nullptr) return;
  std::memset(p, 1, 10000);
  CHECK_EQ(b->counters().live_host_buffers.load(), int64_t(1));
  void* q = nullptr;
  CHECK_ST(b->host_alloc_pinned(0, &q), VPMM_ERR_INVALID_ARGUMENT);
  if (strict()) CHECK_ST(b->host_free_pinned(p, 9999), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ST(b->host_free_pinned(p, 10000), VPMM_OK);
  if (strict()) {
    CHECK_ST(b->host_free_pinned(p, 10000), VPMM_ERR_INVALID_ARGUMENT);  // twice
    CHECK_ERR_HAS("host_alloc_pinned");
  }
  // Memory pinned by none: not the backend's to free.
  std::unique_ptr<vpmm::HostServices> host = vpmm::make_host_services();
  CHECK_ST(host->host_alloc_pageable(10000, &p), VPMM_OK);
  if (p == nullptr) return;
  if (strict()) CHECK_ST(b->host_free_pinned(p, 10000), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ST(host->host_free_pageable(p, 10000), VPMM_OK);
  vt::check_counters_zero(*b);
}

// Stream creation and destruction and device_sync go through the counted
// public face like every other call (nothing reaches a do_* directly).
TEST("stream calls: create/destroy/device_sync are counted") {
  auto b = make();
  if (!b) return;
  auto n = [&](vpmm::Op op) { return b->counters().calls[static_cast<int>(op)].load(); };
  Stream s = nullptr;
  CHECK_ST(b->stream_create(&s), VPMM_OK);
  CHECK(s != nullptr);
  CHECK(b->stream_valid(s));
  CHECK(b->stream_valid(nullptr));
  CHECK_ST(b->stream_create(nullptr), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_ERR_HAS("stream_create");
  CHECK_ST(b->device_sync(), VPMM_OK);
  CHECK_ST(b->stream_destroy(s), VPMM_OK);
  if (strict()) CHECK_ST(b->stream_destroy(s), VPMM_ERR_INVALID_ARGUMENT);  // already destroyed
  CHECK_EQ(n(vpmm::Op::stream_create), uint64_t(2));
  CHECK_EQ(n(vpmm::Op::stream_destroy), uint64_t(strict() ? 2 : 1));
  CHECK_EQ(n(vpmm::Op::device_sync), uint64_t(1));
  CHECK_EQ(std::string(vpmm::op_name(vpmm::Op::device_sync)), std::string("device_sync"));
  CHECK_EQ(std::string(vpmm::op_name(vpmm::Op::pageable_free)), std::string("pageable_free"));
  vt::check_counters_zero(*b);
}

// Many threads on one backend: the bookkeeping stays exact under contention,
// and a double mapping made by one thread shows its bytes to that thread.
TEST("threads: concurrent create/map/event/release on one backend") {
  auto b = make();
  if (!b) return;
  const uint64_t G = b->granularity();
  const int T = 8, N = target().cpu_addressable ? 150 : 20;
  Stream shared = nullptr;
  CHECK_ST(b->stream_create(&shared), VPMM_OK);
  std::atomic<int> errors{0};
  std::vector<std::thread> ths;
  for (int t = 0; t < T; ++t)
    ths.emplace_back([&, t] {
      Stream own = nullptr;
      uint64_t va = 0;
      if (b->stream_create(&own) != VPMM_OK || b->reserve(16 * G, 0, &va) != VPMM_OK) {
        errors++;
        return;
      }
      for (int i = 0; i < N; ++i) {
        const uint64_t size = (1 + (i + t) % 4) * G;
        PhysHandle h = 0;
        if (b->create(size, &h) != VPMM_OK) {
          errors++;
          continue;
        }
        bool ok = b->map(va, size, h) == VPMM_OK && b->map(va + 8 * G, size, h) == VPMM_OK &&
                  b->set_access(va, size) == VPMM_OK && b->set_access(va + 8 * G, size) == VPMM_OK;
        if (ok && target().cpu_addressable) {
          at(va)[size - 1] = static_cast<char>(t + 1);
          ok = at(va + 8 * G)[size - 1] == static_cast<char>(t + 1);
        }
        Stream s = (i % 2) ? own : shared;
        EventHandle e = 0;
        if (b->event_record(s, &e) != VPMM_OK) ok = false;
        if (b->stream_wait((i % 2) ? shared : own, e) != VPMM_OK) ok = false;
        bool done = false;
        if (b->event_query(e, &done) != VPMM_OK) ok = false;
        if (i % 5 == 0 && b->event_sync(e) != VPMM_OK) ok = false;
        if (b->event_destroy(e) != VPMM_OK) ok = false;
        // Release while mapped, then unmap both views (freed at the last one).
        if (b->release(h, size) != VPMM_OK) ok = false;
        if (b->unmap(va, size) != VPMM_OK) ok = false;
        if (b->unmap(va + 8 * G, size) != VPMM_OK) ok = false;
        if (!ok) errors++;
      }
      if (b->unreserve(va, 16 * G) != VPMM_OK) errors++;
      if (b->stream_sync(own) != VPMM_OK || b->stream_destroy(own) != VPMM_OK) errors++;
    });
  for (auto& th : ths) th.join();
  CHECK_EQ(errors.load(), 0);
  CHECK_ST(b->stream_sync(shared), VPMM_OK);
  CHECK_ST(b->stream_destroy(shared), VPMM_OK);
  if (strict() && (b->capabilities() & vpmm::kCapMemInfo)) {
    uint64_t fr = 0, tot = 0;
    CHECK_ST(b->mem_info(&fr, &tot), VPMM_OK);
    CHECK_EQ(fr, tot);
  }
  vt::check_counters_zero(*b);
}

// ---- fault injection (fault-wrapped targets) ---------------------------------------
// The documented failure reporting of tests/support/fault_backend.hpp: the Nth call of a kind
// fails with the planned status and the message "fault injection: KIND call
// #N ...", never reaches the inner backend, and leaves every counter as it
// was; with nothing armed the wrapper is invisible (every case above).

vpmm::FaultBackend* as_fault(Backend* b) { return dynamic_cast<vpmm::FaultBackend*>(b); }

TEST("fault: an injected failure is reported like a driver's and changes nothing") {
  if (!target().fault_wrapped) return;
  auto b = make();
  vpmm::FaultBackend* f = b ? as_fault(b.get()) : nullptr;
  CHECK(f != nullptr);
  if (!f) return;
  const uint64_t G = b->granularity();
  uint64_t va = 0;
  CHECK_ST(b->reserve(4 * G, 0, &va), VPMM_OK);
  PhysHandle h = 0;
  CHECK_ST(b->create(G, &h), VPMM_OK);

  vpmm::FaultPlan plan;
  plan.nth = 2;
  plan.kind = static_cast<int>(vpmm::Op::map);
  plan.status = VPMM_ERR_BACKEND;
  f->arm(plan);
  const uint64_t inner_maps = f->inner().counters().calls[static_cast<int>(vpmm::Op::map)].load();
  CHECK_ST(b->map(va, G, h), VPMM_OK);  // map #1 goes through
  CHECK_ST(b->unmap(va, G), VPMM_OK);
  CHECK_ST(b->map(va, G, h), VPMM_ERR_BACKEND);  // map #2 fails
  CHECK_ERR_HAS("fault injection: map call #2 (call #3 overall) failed with VPMM_ERR_BACKEND");
  CHECK_EQ(b->counters().live_mappings.load(), int64_t(0));
  CHECK_EQ(f->inner().counters().calls[static_cast<int>(vpmm::Op::map)].load(), inner_maps + 1);
  CHECK_EQ(f->injected(), uint64_t(1));
  CHECK_EQ(f->control().last_fault_kind(), static_cast<int>(vpmm::Op::map));
  CHECK_EQ(f->control().last_fault_call(), uint64_t(3));
  CHECK_EQ(f->control().trace(), std::string("map unmap map"));
  CHECK_ST(b->map(va, G, h), VPMM_OK);  // not persistent: #3 goes through
  CHECK_ST(b->unmap(va, G), VPMM_OK);

  // Out of memory on create: no handle, no live bytes.
  plan = vpmm::FaultPlan();
  plan.nth = 1;
  plan.kind = static_cast<int>(vpmm::Op::create);
  plan.status = VPMM_ERR_OUT_OF_MEMORY;
  f->arm(plan);
  PhysHandle h2 = 0;
  CHECK_ST(b->create(G, &h2), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_ERR_HAS("fault injection: create call #1");
  CHECK_EQ(h2, PhysHandle(0));
  CHECK_EQ(b->counters().live_handles.load(), int64_t(1));
  CHECK_EQ(b->counters().live_handle_bytes.load(), int64_t(G));

  // Persistent, any kind: every call fails from the nth on, until disarmed.
  plan = vpmm::FaultPlan();
  plan.nth = 2;
  plan.kind = vpmm::kFaultAny;
  plan.status = VPMM_ERR_BACKEND;
  plan.persistent = true;
  f->arm(plan);
  EventHandle e = 0;
  CHECK_ST(b->event_record(nullptr, &e), VPMM_OK);
  EventHandle e2 = 0;
  CHECK_ST(b->event_record(nullptr, &e2), VPMM_ERR_BACKEND);
  CHECK_EQ(e2, EventHandle(0));
  CHECK_EQ(b->counters().live_events.load(), int64_t(1));
  Stream s = nullptr;
  CHECK_ST(b->stream_create(&s), VPMM_ERR_BACKEND);
  CHECK_ERR_HAS("fault injection: stream_create call #3");
  CHECK_ST(b->event_destroy(e), VPMM_ERR_BACKEND);
  CHECK_EQ(f->injected(), uint64_t(3));
  f->disarm();
  CHECK_ST(b->event_destroy(e), VPMM_OK);
  CHECK_EQ(f->calls(), uint64_t(5));  // numbering goes on after disarm

  CHECK_ST(b->release(h, G), VPMM_OK);
  CHECK_ST(b->unreserve(va, 4 * G), VPMM_OK);
  vt::check_counters_zero(*b);
  CHECK(vpmm::live_counts_zero(f->inner().counters()));
}

TEST("fault: dropped capabilities and a handle cap are what the wrapper reports") {
  if (!target().fault_wrapped) return;
  auto b = make();
  vpmm::FaultBackend* f = b ? as_fault(b.get()) : nullptr;
  CHECK(f != nullptr);
  if (!f) return;
  const uint32_t caps = f->inner().capabilities();
  f->drop_capabilities(vpmm::kCapPinnedHost);
  CHECK_EQ(b->capabilities(), caps & ~vpmm::kCapPinnedHost);
  f->set_max_handle_size(4 * b->granularity());
  CHECK_EQ(b->max_handle_size(), 4 * b->granularity());
  CHECK_EQ(b->kind(), f->inner().kind());
  CHECK_EQ(std::string(b->name()), std::string(f->inner().name()));
}

int usage() {
  size_t n = 0;
  const conformance::Target* t = conformance::targets(&n);
  std::fprintf(stderr, "usage: test_backend_contract TARGET [CASE-FILTER]; targets:");
  for (size_t i = 0; i < n; ++i) std::fprintf(stderr, " %s", t[i].name);
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  alarm(300);  // a deadlock fails the test instead of hanging CI
  if (argc < 2) return usage();
  const conformance::Target* t = conformance::find_target(argv[1]);
  if (t == nullptr) {
    if (std::strcmp(argv[1], "cuda") == 0 || std::strcmp(argv[1], "hip") == 0) {
      std::printf("SKIP: libvpmm was built without the %s backend\n", argv[1]);
      return 77;
    }
    return usage();
  }
  const vpmm::BackendEntry* e = vpmm::find_backend_entry(t->kind);
  if (e == nullptr || !e->usable()) {
    std::printf("SKIP: no usable %s device here (backend %s)\n", t->name,
                e == nullptr ? "not compiled in" : "compiled in, probe failed");
    return 77;
  }
  vpmm_status st = VPMM_OK;
  if (!e->make(vpmm::BackendParams{}, &st)) {
    if (st == VPMM_ERR_UNSUPPORTED) {
      std::printf("SKIP: %s backend unusable here: %s\n", t->name, vpmm::last_error());
      return 77;
    }
  }
  conformance::set_target(t);
  std::printf("backend conformance: target %s\n", t->name);
  // argv[1] is the target: the harness's own filter is what follows it.
  return vt::run_all(argc - 1, argv + 1);
}
