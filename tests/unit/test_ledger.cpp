// The ledger (docs/ledger.md, include/vpmm_ledger.h): pools of several
// processes on one device share one budget. Host backend, several processes
// (fork): admission races never pass the budget, members killed anywhere
// give their share back, reservations count, the segment is refused when it
// is not the user's own 0600 file, and a hostile member (garbage in the
// segment, a claim left pending by a stopped process) makes the others
// refuse or carry on, never crash, hang or over-admit. A reader sees each
// member's own ordinal and its device's identity, a garbage one reported
// unreadable, and an older caller's shorter structs get nothing past their size.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "ledger/layout.hpp"
#include "ledger/ledger.hpp"
#include "ledger/member.hpp"
#include "ledger/process_identity.hpp"
#include "vpmm.h"

namespace {

constexpr uint64_t kPage = 64 << 10;

std::string fresh_name() {
  static int n = 0;
  char buf[64];
  std::snprintf(buf, sizeof buf, "vt-ledger-%d-%d", static_cast<int>(getpid()), ++n);
  vpmm_ledger_remove(buf);  // a leftover of an earlier run with this pid
  return buf;
}

struct NameGuard {  // removes the ledger's name at the end of a case
  std::string name;
  ~NameGuard() { vpmm_ledger_remove(name.c_str()); }
};

vpmm_config host_config(uint64_t initial_pages = 0) {
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = kPage;
  c.va_size = 1024 * kPage;
  c.host_capacity = 256ull << 20;
  c.initial_pages = initial_pages;
  c.small_size = 1;  // every request takes whole pages: one page, one admission
  return c;
}

// A pool in ledger `name`; its budget, if this pool makes the ledger, is
// set right after (the first member's default is the device's memory).
vpmm_pool* join(const std::string& name, uint64_t initial_pages = 0) {
  vpmm_config c = host_config(initial_pages);
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create_ledger(&c, name.c_str(), &p) != VPMM_OK) {
    std::printf("       join %s: %s\n", name.c_str(), vpmm_last_error());
    return nullptr;
  }
  return p;
}

vpmm_ledger_info read_info(const std::string& name) {
  vpmm_ledger_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (vpmm_ledger_read(name.c_str(), 0, &info, nullptr, 0, nullptr) != VPMM_OK)
    std::printf("       read %s: %s\n", name.c_str(), vpmm_last_error());
  return info;
}

// A page shared with children: counters they add to, a flag they wait on.
struct Shared {
  std::atomic<uint64_t> live{0};       // bytes of allocations alive in every child
  std::atomic<uint64_t> peak{0};
  std::atomic<uint64_t> over{0};       // times live passed the budget
  std::atomic<uint64_t> n_ok{0};       // successful mallocs
  std::atomic<uint64_t> n_oom{0};
  std::atomic<uint64_t> n_other{0};    // failures other than out-of-memory
  std::atomic<uint32_t> ready{0};      // children that joined
  std::atomic<uint32_t> stop{0};
};

// A memfd, so that exec'd children map the same page (its fd is inherited).
int g_shared_fd = -1;
Shared* shared_page() {
  if (g_shared_fd >= 0) close(g_shared_fd);
  g_shared_fd = static_cast<int>(syscall(SYS_memfd_create, "vt-ledger-shared", 0));
  if (g_shared_fd < 0 || ftruncate(g_shared_fd, 4096) != 0) return nullptr;
  void* m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, g_shared_fd, 0);
  return new (m) Shared();
}
Shared* map_shared(int fd) {
  void* m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return m == MAP_FAILED ? nullptr : static_cast<Shared*>(m);
}

// Children that start threads (a pool in a ledger has a watcher thread) are
// exec'd, not only forked: a fork of a threaded process may not start
// threads (ThreadSanitizer refuses it, and the sanitizer suite runs these).
pid_t spawn(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"/proc/self/exe", "--child"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  return pid;
}

// A child's allocation loop: M threads each take pages until refused, keep
// them a while, give them back (trimmed, so that the others can have them),
// for `rounds` rounds (or until told to stop, rounds 0).
void hammer(vpmm_pool* p, Shared* sh, uint64_t budget, int threads, int rounds, unsigned seed) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([=] {
      std::minstd_rand rng(seed * 131 + static_cast<unsigned>(t));
      std::vector<void*> held;
      for (int r = 0; rounds == 0 ? sh->stop.load() == 0 : r < rounds; ++r) {
        const int want = 1 + static_cast<int>(rng() % 8);
        for (int k = 0; k < want; ++k) {
          const uint64_t size = kPage * (1 + rng() % 3);
          void* ptr = nullptr;
          const vpmm_status st = vpmm_pool_malloc(p, size, nullptr, &ptr);
          if (st == VPMM_OK) {
            // Counted after the ledger admitted it, uncounted before the
            // free gives it back: live never exceeds what was admitted.
            const uint64_t now = sh->live.fetch_add(size) + size;
            if (now > budget) sh->over.fetch_add(1);
            uint64_t pk = sh->peak.load();
            while (now > pk && !sh->peak.compare_exchange_weak(pk, now)) {
            }
            sh->n_ok.fetch_add(1);
            std::memset(ptr, 0x5a, 64);
            held.push_back(ptr);
            *reinterpret_cast<uint64_t*>(static_cast<char*>(ptr) + 64) = size;
          } else if (st == VPMM_ERR_OUT_OF_MEMORY) {
            sh->n_oom.fetch_add(1);
            break;
          } else {
            sh->n_other.fetch_add(1);
            break;
          }
        }
        while (held.size() > rng() % 3) {
          void* ptr = held.back();
          held.pop_back();
          const uint64_t size = *reinterpret_cast<uint64_t*>(static_cast<char*>(ptr) + 64);
          sh->live.fetch_sub(size);
          vpmm_pool_free(p, ptr, nullptr);
          // Nothing cached: every malloc grows, so every one is an
          // admission, and what live counts is what the members hold.
          vpmm_pool_trim(p, 0);
        }
      }
      for (void* ptr : held) {
        sh->live.fetch_sub(*reinterpret_cast<uint64_t*>(static_cast<char*>(ptr) + 64));
        vpmm_pool_free(p, ptr, nullptr);
      }
    });
  for (auto& t : ts) t.join();
}

int wait_child(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

}  // namespace

TEST("a pool's pages are admitted by its ledger and given back at free, trim and destroy") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_pool* p = join(name, 4);
  CHECK(p != nullptr);
  if (!p) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 16 * kPage));
  vpmm_ledger_info info = read_info(name);
  CHECK_EQ(info.n_members, 1u);
  CHECK_EQ(info.budget_bytes, 16 * kPage);
  CHECK_EQ(info.admitted_bytes, 4 * kPage);  // the initial pages
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 10 * kPage, nullptr, &a));
  CHECK_EQ(read_info(name).admitted_bytes, 10 * kPage);  // the initial pages, then 6 more
  void* b = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, 8 * kPage, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_MSG(std::strstr(vpmm_last_error(), "ledger") && std::strstr(vpmm_last_error(), "(this process)"),
            "the refusal names the ledger and who holds what: %s", vpmm_last_error());
  CHECK_OK(vpmm_pool_malloc(p, 6 * kPage, nullptr, &b));
  CHECK_EQ(read_info(name).admitted_bytes, 16 * kPage);
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_EQ(read_info(name).admitted_bytes, 16 * kPage);  // cached, still mapped
  CHECK_OK(vpmm_pool_trim(p, 0));
  CHECK_EQ(read_info(name).admitted_bytes, 6 * kPage);
  CHECK_OK(vpmm_pool_destroy(p));
  info = read_info(name);
  CHECK_EQ(info.n_members, 0u);
  CHECK_EQ(info.admitted_bytes, 0u);
}

TEST("two pools of one ledger share its budget; a lower budget admits nothing new, a higher one does") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_pool* p = join(name);
  vpmm_pool* q = join(name);
  CHECK(p && q);
  if (!p || !q) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 8 * kPage));
  void* a = nullptr;
  void* b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 5 * kPage, nullptr, &a));
  CHECK_EQ(vpmm_pool_malloc(q, 4 * kPage, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_OK(vpmm_pool_malloc(q, 3 * kPage, nullptr, &b));
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 4 * kPage));  // below what they hold
  CHECK_OK(vpmm_pool_free(q, b, nullptr));
  CHECK_OK(vpmm_pool_trim(q, 0));
  CHECK_EQ(vpmm_pool_malloc(q, kPage, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);  // 5 held, budget 4
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 6 * kPage));
  CHECK_OK(vpmm_pool_malloc(q, kPage, nullptr, &b));
  vpmm_pool_destroy(p);
  vpmm_pool_destroy(q);
}

TEST("a reservation counts as admitted, once: growths under it draw on it, its release gives the rest back") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_pool* p = join(name);
  vpmm_pool* q = join(name);
  CHECK(p && q);
  if (!p || !q) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 10 * kPage));
  vpmm_reservation* r = nullptr;
  CHECK_OK(vpmm_pool_reserve(p, 6 * kPage, 0, &r));
  CHECK_EQ(read_info(name).admitted_bytes, 6 * kPage);
  void* b = nullptr;
  CHECK_EQ(vpmm_pool_malloc(q, 5 * kPage, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_OK(vpmm_pool_malloc(q, 4 * kPage, nullptr, &b));
  // p's allocation under its reservation needs no more admission.
  void* a = nullptr;
  vpmm_alloc_attrs at;
  std::memset(&at, 0, sizeof at);
  at.struct_size = sizeof at;
  at.reservation = r;
  CHECK_OK(vpmm_pool_malloc_ex(p, 4 * kPage, nullptr, &at, &a));
  CHECK_EQ(read_info(name).admitted_bytes, 10 * kPage);
  vpmm_reservation* r2 = nullptr;
  CHECK_EQ(vpmm_pool_reserve(q, kPage, 0, &r2), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_OK(vpmm_reservation_release(p, r));  // 2 pages of it unused: back
  CHECK_EQ(read_info(name).admitted_bytes, 8 * kPage);
  CHECK_OK(vpmm_pool_reserve(q, 2 * kPage, 0, &r2));
  vpmm_pool_destroy(p);
  vpmm_pool_destroy(q);
  CHECK_EQ(read_info(name).admitted_bytes, 0u);
}

// Two members of ledger `name` on device 0 of a `budget`-byte budget.
static bool join_two(const std::string& name, uint64_t budget, std::unique_ptr<vpmm::ledger::LedgerMember>* a,
                     std::unique_ptr<vpmm::ledger::LedgerMember>* b) {
  vpmm::ledger::JoinRequest req;
  req.name = name.c_str();
  req.budget_bytes = budget;
  CHECK_OK(vpmm::ledger::LedgerMember::join("test", req, a));
  CHECK_OK(vpmm::ledger::LedgerMember::join("test", req, b));
  return *a && *b;
}

TEST("two admissions racing at the worst moment: one of them sees the other, the budget holds") {
  const std::string name = fresh_name();
  NameGuard g{name};
  std::unique_ptr<vpmm::ledger::LedgerMember> a, b;
  if (!join_two(name, 10 * kPage, &a, &b)) return;
  // b's whole admission falls between a's claim and a's look at the others.
  vpmm_status b_status = VPMM_ERR_INTERNAL;
  bool raced = false;
  a->set_race_point_for_tests([&] {
    if (raced) return;  // a's retries, if any, see b as it is
    raced = true;
    b_status = b->admit(6 * kPage);
  });
  const vpmm_status a_status = a->admit(6 * kPage);
  CHECK(a_status == VPMM_OK || b_status == VPMM_OK);
  CHECK_MSG(a_status != VPMM_OK || b_status != VPMM_OK, "both admitted 6 of a 10-page budget");
  CHECK(read_info(name).admitted_bytes <= 10 * kPage);
}

TEST("a claim in flight is not shown as admitted: readers see what the budget holds, never a tentative charge") {
  // Claim-then-look publishes a claim's charge before it looks at the
  // others; a refused claim takes it back. Readers (vpmm_ledger_read, the
  // GPU test's sampler, `vpmm ledger`) must not count it meanwhile: on the
  // H200 a sampler saw 2 GiB "admitted" of a 1.5 GiB budget while an engine's
  // refused claims retried, though nothing past the budget was ever mapped.
  const std::string name = fresh_name();
  NameGuard g{name};
  std::unique_ptr<vpmm::ledger::LedgerMember> a, b;
  if (!join_two(name, 10 * kPage, &a, &b)) return;
  CHECK_OK(a->admit(6 * kPage));
  uint64_t seen_kept = UINT64_MAX, seen_refused = UINT64_MAX;
  uint64_t* seen = &seen_kept;
  b->set_race_point_for_tests([&] {
    if (*seen == UINT64_MAX) *seen = read_info(name).admitted_bytes;  // b's charge holds its claim now
  });
  CHECK_OK(b->admit(3 * kPage));  // fits: kept
  CHECK_EQ(seen_kept, 6 * kPage);
  CHECK_EQ(read_info(name).admitted_bytes, 9 * kPage);
  seen = &seen_refused;
  CHECK_EQ(b->admit(4 * kPage), VPMM_ERR_OUT_OF_MEMORY);  // 13 > 10, a does not answer: taken back
  CHECK_EQ(seen_refused, 9 * kPage);
  CHECK_EQ(read_info(name).admitted_bytes, 9 * kPage);
}

TEST("devices are keyed by identity: one device under two ordinals has one budget, another device its own") {
  const std::string name = fresh_name();
  NameGuard g{name};
  uint8_t gpu[16], other[16];
  for (int i = 0; i < 16; ++i) {
    gpu[i] = static_cast<uint8_t>(0xa0 + i);
    other[i] = static_cast<uint8_t>(0x10 + i);
  }
  vpmm::ledger::JoinRequest req;
  req.name = name.c_str();
  req.budget_bytes = 10 * kPage;
  req.device_id = gpu;
  req.device = 0;  // CUDA_VISIBLE_DEVICES=0,1 in one process ...
  std::unique_ptr<vpmm::ledger::LedgerMember> a, b, c;
  CHECK_OK(vpmm::ledger::LedgerMember::join("test", req, &a));
  req.device = 3;  // ... =3 in another: the same GPU
  CHECK_OK(vpmm::ledger::LedgerMember::join("test", req, &b));
  req.device_id = other;
  req.device = 0;  // another GPU that its own process calls 0
  CHECK_OK(vpmm::ledger::LedgerMember::join("test", req, &c));
  if (!a || !b || !c) return;
  CHECK_OK(a->admit(6 * kPage));
  CHECK_EQ(b->admit(6 * kPage), VPMM_ERR_OUT_OF_MEMORY);  // one budget: 6 + 6 > 10
  CHECK_OK(b->admit(4 * kPage));
  CHECK_OK(c->admit(10 * kPage));  // its own budget
  vpmm_ledger_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  vpmm_ledger_member ms[4];
  std::memset(ms, 0, sizeof ms);
  ms[0].struct_size = sizeof ms[0];
  uint32_t n = 0;
  CHECK_OK(vpmm_ledger_read(name.c_str(), 1, &info, ms, 4, &n));
  CHECK_EQ(info.admitted_bytes, 10 * kPage);  // the ledger's device 1: the other GPU
  CHECK_EQ(n, 3u);
  CHECK_EQ(ms[0].device, 0);
  CHECK_EQ(ms[1].device, 0);
  CHECK_EQ(ms[2].device, 1);
  CHECK_EQ(read_info(name).admitted_bytes, 10 * kPage);  // device 0: a's 6 and b's 4
  // A 17th device has no entry left; the 16 that have one still join.
  std::vector<std::unique_ptr<vpmm::ledger::LedgerMember>> more;
  for (int d = 2; d < 16; ++d) {
    uint8_t id[16] = {};
    id[0] = static_cast<uint8_t>(d);
    req.device_id = id;
    more.emplace_back();
    CHECK_OK(vpmm::ledger::LedgerMember::join("test", req, &more.back()));
  }
  uint8_t seventeenth[16] = {0xff};
  req.device_id = seventeenth;
  std::unique_ptr<vpmm::ledger::LedgerMember> x;
  CHECK_EQ(vpmm::ledger::LedgerMember::join("test", req, &x), VPMM_ERR_UNSUPPORTED);
  req.device_id = gpu;
  CHECK_OK(vpmm::ledger::LedgerMember::join("test", req, &x));
}

TEST("pools join by their backend's device identity; a corrupt device table is refused") {
  const std::string name = fresh_name();
  NameGuard g{name};
  // The host backend's identity mixes in the ordinal: two devices.
  vpmm_config c0 = host_config(), c2 = host_config();
  c2.device = 2;
  vpmm_pool* p = nullptr;
  vpmm_pool* q = nullptr;
  CHECK_OK(vpmm_pool_create_ledger(&c0, name.c_str(), &p));
  CHECK_OK(vpmm_pool_create_ledger(&c2, name.c_str(), &q));
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 1, 2 * kPage));  // q's device is the ledger's device 1
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 4 * kPage, nullptr, &a));  // device 0's budget: the host memory
  CHECK_EQ(vpmm_pool_malloc(q, 4 * kPage, nullptr, &a), VPMM_ERR_OUT_OF_MEMORY);
  vpmm_pool_destroy(q);
  // Garbage over a device table entry: joiners refuse, naming it.
  const std::string path = "/dev/shm/vpmm.ledger." + name;
  int fd = open(path.c_str(), O_RDWR);
  CHECK(fd >= 0);
  if (fd < 0) return;
  void* m = mmap(nullptr, vpmm::ledger::kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(m != MAP_FAILED);
  if (m == MAP_FAILED) return;
  static_cast<vpmm::ledger::Segment*>(m)->header.device_key[0].store(0x1234567);
  CHECK_EQ(vpmm_pool_create_ledger(&c2, name.c_str(), &q), VPMM_ERR_WRONG_STATE);
  CHECK_MSG(std::strstr(vpmm_last_error(), "device table") != nullptr, "%s", vpmm_last_error());
  CHECK(q == nullptr);
  munmap(m, vpmm::ledger::kSegmentBytes);
  close(fd);
  vpmm_pool_destroy(p);
}

namespace {
// A member's identity words as the 16 bytes they stand for.
void id_of(uint64_t hi, uint64_t lo, uint8_t out[16]) { vpmm::ledger::words_to_id(hi, lo, out); }

// Every member of ledger `name` (and *info for `device`) at today's sizes.
std::vector<vpmm_ledger_member> read_members(const std::string& name, int32_t device = 0,
                                             vpmm_ledger_info* info = nullptr) {
  std::vector<vpmm_ledger_member> ms(VPMM_LEDGER_MEMBERS);
  std::memset(ms.data(), 0, ms.size() * sizeof ms[0]);
  ms[0].struct_size = sizeof ms[0];
  if (info) {
    std::memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
  }
  uint32_t n = 0;
  if (vpmm_ledger_read(name.c_str(), device, info, ms.data(), VPMM_LEDGER_MEMBERS, &n) != VPMM_OK) {
    std::printf("       read %s: %s\n", name.c_str(), vpmm_last_error());
    n = 0;
  }
  ms.resize(n);
  return ms;
}

// The segment of ledger `name`, mapped to write garbage into (unmapped by the caller).
vpmm::ledger::Segment* map_segment(const std::string& name) {
  const std::string path = "/dev/shm/vpmm.ledger." + name;
  const int fd = open(path.c_str(), O_RDWR);
  if (fd < 0) return nullptr;
  void* m = mmap(nullptr, vpmm::ledger::kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return m == MAP_FAILED ? nullptr : static_cast<vpmm::ledger::Segment*>(m);
}
}  // namespace

TEST("a member shows its own ordinal and its device's identity: one GPU under ordinals 0 and 3, one identity") {
  const std::string name = fresh_name();
  NameGuard g{name};
  uint8_t gpu[16], other[16];
  for (int i = 0; i < 16; ++i) {
    gpu[i] = static_cast<uint8_t>(0xa0 + i);
    other[i] = static_cast<uint8_t>(0x10 + i);
  }
  vpmm::ledger::JoinRequest req;
  req.name = name.c_str();
  req.budget_bytes = 10 * kPage;
  req.device_id = gpu;
  req.device = 0;  // CUDA_VISIBLE_DEVICES=1 in the trainer: the GPU is its 0 ...
  std::unique_ptr<vpmm::ledger::LedgerMember> a, b, c;
  CHECK_OK(vpmm::ledger::LedgerMember::join("test", req, &a));
  req.device = 3;  // ... and the engine's 3
  CHECK_OK(vpmm::ledger::LedgerMember::join("test", req, &b));
  req.device_id = other;
  req.device = 0;
  CHECK_OK(vpmm::ledger::LedgerMember::join("test", req, &c));
  if (!a || !b || !c) return;
  vpmm_ledger_info info;
  const std::vector<vpmm_ledger_member> ms = read_members(name, 0, &info);
  CHECK_EQ(ms.size(), size_t{3});
  if (ms.size() != 3) return;
  // Its own ordinal each; the same device, so the same index and identity.
  CHECK_EQ(ms[0].ordinal, 0);
  CHECK_EQ(ms[1].ordinal, 3);
  CHECK_EQ(ms[2].ordinal, 0);
  CHECK_EQ(ms[0].device, 0);
  CHECK_EQ(ms[1].device, 0);
  CHECK_EQ(ms[2].device, 1);
  uint8_t id[16];
  for (int i = 0; i < 3; ++i) {
    CHECK_EQ(ms[i].device_id_state, uint32_t{VPMM_LEDGER_ID_OK});
    CHECK_EQ(ms[i].corrupt, 0u);
    id_of(ms[i].device_id_hi, ms[i].device_id_lo, id);
    CHECK(std::memcmp(id, i < 2 ? gpu : other, 16) == 0);
  }
  // Bytes 0-7 are hi's, big-endian: printed hi then lo it reads a0a1a2...
  CHECK_EQ(ms[0].device_id_hi, 0xa0a1a2a3a4a5a6a7ull);
  CHECK_EQ(ms[0].device_id_lo, 0xa8a9aaabacadaeafull);
  // The budget's device names its identity too; an index nobody took, none.
  CHECK_EQ(info.device_id_state, uint32_t{VPMM_LEDGER_ID_OK});
  CHECK_EQ(info.device_id_hi, ms[0].device_id_hi);
  CHECK_EQ(info.device_id_lo, ms[0].device_id_lo);
  CHECK_EQ(info.n_devices, 2u);
  read_members(name, 1, &info);
  id_of(info.device_id_hi, info.device_id_lo, id);
  CHECK(info.device_id_state == VPMM_LEDGER_ID_OK && std::memcmp(id, other, 16) == 0);
  read_members(name, 5, &info);
  CHECK_EQ(info.device_id_state, uint32_t{VPMM_LEDGER_ID_NO_DEVICE});
  CHECK(info.device_id_hi == 0 && info.device_id_lo == 0);
  // A slot reused by another member shows that member's ordinal, not the last one's.
  b.reset();
  req.device_id = gpu;
  req.device = 7;
  CHECK_OK(vpmm::ledger::LedgerMember::join("test", req, &b));
  const std::vector<vpmm_ledger_member> again = read_members(name);
  CHECK_EQ(again.size(), size_t{3});
  if (again.size() == 3) CHECK_EQ(again[1].ordinal, 7);
}

TEST("host pools of ordinals 0 and 2 show them, each with the host backend's identity of its ordinal") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_config c0 = host_config(), c2 = host_config();
  c2.device = 2;
  vpmm_pool* p = nullptr;
  vpmm_pool* q = nullptr;
  CHECK_OK(vpmm_pool_create_ledger(&c0, name.c_str(), &p));
  CHECK_OK(vpmm_pool_create_ledger(&c2, name.c_str(), &q));
  const std::vector<vpmm_ledger_member> ms = read_members(name);
  CHECK_EQ(ms.size(), size_t{2});
  if (ms.size() == 2) {
    CHECK_EQ(ms[0].ordinal, 0);
    CHECK_EQ(ms[1].ordinal, 2);
    CHECK(ms[0].device_id_state == VPMM_LEDGER_ID_OK && ms[1].device_id_state == VPMM_LEDGER_ID_OK);
    // The host backend's identity: the boot id, its last 4 bytes xor'ed with the ordinal.
    char text[64] = "";
    if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
      if (!std::fgets(text, sizeof text, f)) text[0] = '\0';
      std::fclose(f);
    }
    uint8_t boot[16] = {};
    int n = 0;
    for (const char* t = text; *t && n < 32; ++t) {
      const int v = *t >= '0' && *t <= '9' ? *t - '0' : *t >= 'a' && *t <= 'f' ? *t - 'a' + 10 : -1;
      if (v >= 0) boot[n / 2] = static_cast<uint8_t>(boot[n / 2] << 4 | v), ++n;
    }
    uint8_t id0[16], id2[16];
    id_of(ms[0].device_id_hi, ms[0].device_id_lo, id0);
    id_of(ms[1].device_id_hi, ms[1].device_id_lo, id2);
    if (n == 32) CHECK(std::memcmp(id0, boot, 16) == 0);
    boot[12] ^= 2;  // the ordinal, little-endian into bytes 12-15
    if (n == 32) CHECK(std::memcmp(id2, boot, 16) == 0);
    CHECK(std::memcmp(id0, id2, 16) != 0);
  }
  vpmm_pool_destroy(q);
  vpmm_pool_destroy(p);
}

TEST("a caller of the older, shorter structs gets their fields and nothing written past its struct_size") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_pool* p = join(name);
  vpmm_pool* q = join(name);
  CHECK(p && q);
  if (!p || !q) return;
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(q, 2 * kPage, nullptr, &a));
  // The sizes before the ordinal and identity: strides of 104 (and one of
  // today's size plus 16, a newer caller's), an info of 64 bytes.
  const uint32_t old_member = offsetof(vpmm_ledger_member, ordinal);
  const uint32_t old_info = offsetof(vpmm_ledger_info, device_id_state);
  CHECK_EQ(old_member, 104u);
  CHECK_EQ(old_info, 64u);
  for (uint32_t stride : {old_member, uint32_t(sizeof(vpmm_ledger_member) + 16)}) {
    std::vector<unsigned char> buf(4 * stride + 64, 0xa5);
    std::memcpy(buf.data(), &stride, sizeof stride);
    std::vector<unsigned char> ibuf(sizeof(vpmm_ledger_info) + 64, 0xa5);
    const uint32_t isz = stride == old_member ? old_info : uint32_t(sizeof(vpmm_ledger_info));
    std::memcpy(ibuf.data(), &isz, sizeof isz);
    uint32_t n = 0;
    CHECK_OK(vpmm_ledger_read(name.c_str(), 0, reinterpret_cast<vpmm_ledger_info*>(ibuf.data()),
                              reinterpret_cast<vpmm_ledger_member*>(buf.data()), 2, &n));
    CHECK_EQ(n, 2u);
    const size_t filled = std::min<size_t>(stride, sizeof(vpmm_ledger_member));
    for (uint32_t i = 0; i < 2; ++i) {
      vpmm_ledger_member m;
      std::memset(&m, 0, sizeof m);
      std::memcpy(&m, buf.data() + size_t{i} * stride, filled);
      CHECK_EQ(m.struct_size, stride);
      CHECK_EQ(m.pid, static_cast<int32_t>(getpid()));
      CHECK_EQ(m.admitted_bytes, i == 1 ? 2 * kPage : 0);
      if (stride > sizeof m) CHECK_EQ(m.ordinal, 0);  // the newer caller has them
      for (size_t k = filled; k < stride; ++k) CHECK_EQ(buf[size_t{i} * stride + k], 0xa5);
    }
    for (size_t k = 2 * size_t{stride}; k < buf.size(); ++k) CHECK_EQ(buf[k], 0xa5);
    vpmm_ledger_info info;
    std::memcpy(&info, ibuf.data(), std::min<size_t>(isz, sizeof info));
    CHECK_EQ(info.struct_size, isz);
    CHECK_EQ(info.admitted_bytes, 2 * kPage);
    CHECK_EQ(info.n_members, 2u);
    for (size_t k = isz; k < ibuf.size(); ++k) CHECK_EQ(ibuf[k], 0xa5);
  }
  CHECK_OK(vpmm_pool_free(q, a, nullptr));
  vpmm_pool_destroy(q);
  vpmm_pool_destroy(p);
}

TEST("a garbage ordinal or identity in the segment is reported unreadable, never believed; admission goes on") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_pool* p = join(name);
  vpmm_pool* q = join(name);
  CHECK(p && q);
  if (!p || !q) return;
  vpmm::ledger::Segment* seg = map_segment(name);
  CHECK(seg != nullptr);
  if (!seg) return;
  std::vector<vpmm_ledger_member> ms = read_members(name);
  CHECK_EQ(ms.size(), size_t{2});
  if (ms.size() != 2) return;
  const uint32_t qs = ms[1].slot;
  const uint64_t hi = ms[1].device_id_hi, lo = ms[1].device_id_lo;
  // q's ordinal word: garbage, then a plausible word (ordinal 5 + 1) without its check.
  for (uint64_t garbage : {uint64_t{0x0123456789abcdefull}, uint64_t{6} << 24}) {
    seg->slots[qs].s.ordinal.store(garbage);
    ms = read_members(name);
    CHECK(ms.size() == 2 && ms[1].ordinal == VPMM_LEDGER_ORDINAL_UNREADABLE);
    CHECK(ms.size() == 2 && ms[1].corrupt == 0 && ms[0].ordinal == 0);  // only the shown figure is lost
  }
  // A word that is not written: a member of an earlier libvpmm.
  seg->slots[qs].s.ordinal.store(0);
  ms = read_members(name);
  CHECK(ms.size() == 2 && ms[1].ordinal == VPMM_LEDGER_ORDINAL_NOT_RECORDED);
  // It shows nowhere as an index: admission carries on.
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(q, 2 * kPage, nullptr, &a));
  // The device table's identity words: garbage in one, then in both.
  const uint64_t w0 = seg->header.device_id[0][0].load(), w1 = seg->header.device_id[0][1].load();
  CHECK(w0 != 0 && w1 != 0);
  seg->header.device_id[0][1].store(w1 ^ 0x100);
  vpmm_ledger_info info;
  ms = read_members(name, 0, &info);
  CHECK_EQ(info.device_id_state, uint32_t{VPMM_LEDGER_ID_UNREADABLE});
  CHECK(info.device_id_hi == 0 && info.device_id_lo == 0);
  CHECK(ms.size() == 2 && ms[0].device_id_state == VPMM_LEDGER_ID_UNREADABLE && ms[0].device_id_hi == 0);
  CHECK_EQ(info.n_corrupt, 0u);  // not a slot's fault: admission does not refuse
  void* b = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &b));
  // Unwritten (an entry an earlier libvpmm made): the next joiner of the device writes it.
  seg->header.device_id[0][0].store(0);
  seg->header.device_id[0][1].store(0);
  read_members(name, 0, &info);
  CHECK_EQ(info.device_id_state, uint32_t{VPMM_LEDGER_ID_NOT_RECORDED});
  vpmm_pool* r = join(name);
  CHECK(r != nullptr);
  ms = read_members(name, 0, &info);
  CHECK_EQ(info.device_id_state, uint32_t{VPMM_LEDGER_ID_OK});
  CHECK(info.device_id_hi == hi && info.device_id_lo == lo);
  CHECK(ms.size() == 3 && ms[2].ordinal == 0 && ms[2].device_id_hi == hi);
  // A device table entry that fails its check: its identity is not believed either.
  const uint64_t key = seg->header.device_key[0].load();
  seg->header.device_key[0].store(key ^ (1ull << 30));
  ms = read_members(name, 0, &info);
  CHECK_EQ(info.device_id_state, uint32_t{VPMM_LEDGER_ID_UNREADABLE});
  CHECK(ms.size() == 3 && ms[0].device_id_state == VPMM_LEDGER_ID_UNREADABLE);
  seg->header.device_key[0].store(key);
  // A member's device index out of range: no identity is looked up with it.
  const uint64_t dev = seg->slots[qs].s.device.load();
  seg->slots[qs].s.device.store(99);
  ms = read_members(name);
  CHECK(ms.size() == 3 && ms[1].device == VPMM_LEDGER_DEVICES &&
        ms[1].device_id_state == VPMM_LEDGER_ID_UNREADABLE && ms[1].corrupt == 1);
  seg->slots[qs].s.device.store(dev);
  munmap(seg, vpmm::ledger::kSegmentBytes);
  CHECK_OK(vpmm_pool_free(q, a, nullptr));
  CHECK_OK(vpmm_pool_free(p, b, nullptr));
  vpmm_pool_destroy(r);
  vpmm_pool_destroy(q);
  vpmm_pool_destroy(p);
}

TEST("4 processes x 4 threads allocating to the budget never pass it, and nothing is left after") {
  const std::string name = fresh_name();
  NameGuard g{name};
  const uint64_t budget = 48 * kPage;
  vpmm_pool* p = join(name);  // makes the ledger, sets its budget before any child joins
  CHECK(p != nullptr);
  if (!p) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, budget));
  Shared* sh = shared_page();
  std::vector<pid_t> kids;
  for (int k = 0; k < 4; ++k)
    kids.push_back(spawn({"hammer", name, std::to_string(budget), "4", "40", std::to_string(k + 1),
                          std::to_string(g_shared_fd)}));
  for (pid_t pid : kids) CHECK_EQ(wait_child(pid), 0);
  CHECK_EQ(sh->over.load(), 0u);
  CHECK_EQ(sh->n_other.load(), 0u);
  CHECK(sh->n_ok.load() > 0);
  CHECK(sh->n_oom.load() > 0);  // they did reach the budget
  std::printf("       %llu mallocs, %llu refused, peak %llu of %llu bytes\n",
              static_cast<unsigned long long>(sh->n_ok.load()), static_cast<unsigned long long>(sh->n_oom.load()),
              static_cast<unsigned long long>(sh->peak.load()), static_cast<unsigned long long>(budget));
  const vpmm_ledger_info info = read_info(name);
  CHECK_EQ(info.n_members, 1u);  // the parent's pool
  CHECK_EQ(info.admitted_bytes, 0u);
  // The whole budget is there for the taking again.
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, budget, nullptr, &a));
  vpmm_pool_destroy(p);
}

TEST("members SIGKILLed at random points give their share back to the next member that looks") {
  const std::string name = fresh_name();
  NameGuard g{name};
  const uint64_t budget = 32 * kPage;
  vpmm_pool* p = join(name);
  CHECK(p != nullptr);
  if (!p) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, budget));
  std::minstd_rand rng(7);
  for (int round = 0; round < 6; ++round) {
    Shared* sh = shared_page();
    std::vector<pid_t> kids;
    for (int k = 0; k < 3; ++k)
      kids.push_back(spawn({"hammer", name, std::to_string(budget), "3", "0", std::to_string(round * 10 + k),
                            std::to_string(g_shared_fd)}));
    // Kill each child after it made a random number of allocations more.
    for (pid_t pid : kids) {
      const uint64_t until = sh->n_ok.load() + rng() % 200;
      while (sh->n_ok.load() < until && sh->n_oom.load() + sh->n_ok.load() < until + 100000) std::this_thread::yield();
      kill(pid, SIGKILL);
    }
    for (pid_t pid : kids) {
      const int st = wait_child(pid);
      CHECK(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0));
    }
    // (No over-budget check here: a killed child's bytes stay in the shared
    // count it can no longer take them out of; the race test checks that.)
    CHECK(sh->n_other.load() == 0);
    munmap(sh, 4096);
    const vpmm_ledger_info info = read_info(name);  // reading is looking: the dead are reclaimed
    CHECK_EQ(info.n_members, 1u);
    CHECK_EQ(info.admitted_bytes, 0u);
  }
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, budget, nullptr, &a));
  vpmm_pool_destroy(p);
}

TEST("a member that dies between its claim and its admission's end leaks nothing") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_pool* p = join(name);
  CHECK(p != nullptr);
  if (!p) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 16 * kPage));
  // The child does what an admission does up to its publication of the new
  // charge, with its pending claim still set, and dies there.
  pid_t pid = fork();
  if (pid == 0) {
    std::unique_ptr<vpmm::ledger::Ledger> l;
    if (vpmm::ledger::Ledger::open("child", name.c_str(), false, &l) != VPMM_OK) _exit(2);
    uint32_t slot = 0;
    uint64_t owner = 0;
    if (l->claim("child", 0, 0, &slot, &owner) != VPMM_OK) _exit(3);
    vpmm::ledger::Slot& s = l->slot(slot);
    s.pending.store(vpmm::ledger::units_up(12 * kPage));
    s.charge.store(vpmm::ledger::encode_units(vpmm::ledger::units_up(12 * kPage),
                                              vpmm::ledger::charge_field(slot) ^ (vpmm::ledger::owner_gen(owner) << 32),
                                              l->nonce()));
    _exit(0);
  }
  CHECK_EQ(wait_child(pid), 0);
  // Its 12 pages are gone with it: the whole budget can be had.
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 16 * kPage, nullptr, &a));
  CHECK_EQ(read_info(name).n_members, 1u);
  vpmm_pool_destroy(p);
}

TEST("a stopped member's pending claim counts and bounds the others' retries; nobody hangs or over-admits") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_pool* p = join(name);
  CHECK(p != nullptr);
  if (!p) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 16 * kPage));
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    std::unique_ptr<vpmm::ledger::Ledger> l;
    if (vpmm::ledger::Ledger::open("child", name.c_str(), false, &l) != VPMM_OK) _exit(2);
    uint32_t slot = 0;
    uint64_t owner = 0;
    if (l->claim("child", 0, 0, &slot, &owner) != VPMM_OK) _exit(3);
    vpmm::ledger::Slot& s = l->slot(slot);
    s.pending.store(vpmm::ledger::units_up(6 * kPage));
    s.charge.store(vpmm::ledger::encode_units(vpmm::ledger::units_up(6 * kPage),
                                              vpmm::ledger::charge_field(slot) ^ (vpmm::ledger::owner_gen(owner) << 32),
                                              l->nonce()));
    char c = 1;
    if (write(fds[1], &c, 1) != 1) _exit(4);
    raise(SIGSTOP);  // stopped mid-admission, for good
    _exit(0);
  }
  char c = 0;
  CHECK(read(fds[0], &c, 1) == 1);
  int st = 0;
  CHECK(waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st));
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 10 * kPage, nullptr, &a));  // 6 + 10 = the budget
  void* b = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, kPage, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);  // refused after bounded retries
  kill(pid, SIGKILL);
  wait_child(pid);
  CHECK_OK(vpmm_pool_malloc(p, 6 * kPage, nullptr, &b));  // its share came back
  vpmm_pool_destroy(p);
  close(fds[0]);
  close(fds[1]);
}

TEST("garbage written into the segment makes members refuse, never crash or over-admit") {
  for (int where = 0; where < 3; ++where) {  // 0: a free slot's charge, 1: a member's slot, 2: everything
    const std::string name = fresh_name();
    NameGuard g{name};
    vpmm_pool* p = join(name);
    vpmm_pool* q = join(name);
    CHECK(p && q);
    if (!p || !q) return;
    CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 16 * kPage));
    void* a = nullptr;
    CHECK_OK(vpmm_pool_malloc(q, 8 * kPage, nullptr, &a));
    pid_t pid = fork();
    if (pid == 0) {  // the hostile member: same user, writes through its own mapping
      const std::string path = "/dev/shm/vpmm.ledger." + name;
      int fd = open(path.c_str(), O_RDWR);
      if (fd < 0) _exit(2);
      auto* seg = static_cast<unsigned char*>(
          mmap(nullptr, vpmm::ledger::kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      if (seg == MAP_FAILED) _exit(3);
      std::minstd_rand rng(where + 1);
      if (where == 0) {
        auto* s = reinterpret_cast<vpmm::ledger::Segment*>(seg);
        s->slots[40].s.charge.store(0x1234);
      } else if (where == 1) {
        auto* s = reinterpret_cast<vpmm::ledger::Segment*>(seg);
        for (uint32_t i = 0; i < vpmm::ledger::kSlots; ++i)
          if (vpmm::ledger::owner_state(s->slots[i].s.owner.load()) == vpmm::ledger::kActive &&
              s->slots[i].s.charge.load() != 0)
            s->slots[i].s.charge.store((uint64_t(rng()) << 32) | rng());  // q's slot
      } else {
        for (uint64_t i = 0; i < vpmm::ledger::kSegmentBytes; ++i) seg[i] = static_cast<unsigned char>(rng());
      }
      _exit(0);
    }
    CHECK_EQ(wait_child(pid), 0);
    void* b = nullptr;
    const vpmm_status st = vpmm_pool_malloc(p, 8 * kPage, nullptr, &b);
    CHECK_EQ(st, VPMM_ERR_OUT_OF_MEMORY);
    CHECK_MSG(std::strstr(vpmm_last_error(), "trusted") || std::strstr(vpmm_last_error(), "overwritten") ||
                  std::strstr(vpmm_last_error(), "rewritten"),
              "case %d: %s", where, vpmm_last_error());
    // Reading the ledger does not crash either, and says what it found.
    vpmm_ledger_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    vpmm_ledger_member ms[8];
    std::memset(ms, 0, sizeof ms);
    ms[0].struct_size = sizeof ms[0];
    uint32_t n = 0;
    const vpmm_status rs = vpmm_ledger_read(name.c_str(), 0, &info, ms, 8, &n);
    if (where < 2)
      CHECK(rs == VPMM_OK && info.n_corrupt >= 1);
    else
      CHECK_EQ(rs, VPMM_ERR_WRONG_STATE);  // the header fails its check: refused
    // q's own memory stays its own, and its free works.
    CHECK_OK(vpmm_pool_free(q, a, nullptr));
    vpmm_pool_destroy(p);
    vpmm_pool_destroy(q);
  }
}

namespace {
std::atomic<int> g_pressure_calls{0};
void count_pressure(vpmm_pool*, int under, uint64_t, void*) {
  if (under) g_pressure_calls.fetch_add(1);
}
bool pattern_ok(const void* p, uint64_t n, unsigned char seed) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (uint64_t i = 0; i < n; i += 4093)
    if (b[i] != static_cast<unsigned char>(seed + i / 4093)) return false;
  return true;
}
void fill_pattern(void* p, uint64_t n, unsigned char seed) {
  unsigned char* b = static_cast<unsigned char*>(p);
  for (uint64_t i = 0; i < n; i += 4093) b[i] = static_cast<unsigned char>(seed + i / 4093);
}
}  // namespace

TEST("pressure round trip: a trainer's evictable tag is paused to admit an engine, both intact after") {
  const std::string name = fresh_name();
  NameGuard g{name};
  const uint64_t engine = 8 * kPage;  // the trainer holds 12 pages of weights
  vpmm_pool* e = join(name);  // the engine (this process) makes the ledger
  CHECK(e != nullptr);
  if (!e) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 16 * kPage));
  int to_child[2], to_parent[2];
  CHECK(pipe(to_child) == 0 && pipe(to_parent) == 0);
  pid_t pid = spawn({"trainer", name, std::to_string(to_child[0]), std::to_string(to_parent[1])});
  char c = 0;
  CHECK(read(to_parent[0], &c, 1) == 1);
  // 12 pages of weights + 8 would pass the 16-page budget: the trainer pauses them.
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(e, engine, nullptr, &x));
  if (x) {
    fill_pattern(x, engine, 99);
    CHECK(pattern_ok(x, engine, 99));
  }
  // The engine is admitted as soon as the pause gave the pages back, which
  // can be before the trainer's watcher counts its answer: look until it has
  // (a few milliseconds; seconds on a loaded host under a sanitizer).
  bool trainer_answered = false, engine_shown = false;
  for (int look = 0; look < 1000 && !trainer_answered; ++look) {
    if (look) usleep(10 * 1000);
    vpmm_ledger_info info;
    for (const vpmm_ledger_member& m : read_members(name, 0, &info)) {
      if (m.pid == pid) trainer_answered = m.n_pressure_answered >= 1 && m.n_evictable_tags == 1;
      // The asker's figures say how often it asked and how long its
      // admissions waited: its retries sleep 2 ms each, so at least that.
      if (m.pid == static_cast<int32_t>(getpid()))
        engine_shown = m.n_pressure_asked >= 1 && m.n_admissions >= 1 && m.n_refused == 0 &&
                       m.admission_wait_ns >= 2000000ull;
    }
    CHECK(info.admitted_bytes <= 16 * kPage);
    CHECK(info.n_pressure_requests >= 1);
  }
  CHECK(trainer_answered);
  CHECK(engine_shown);
  if (x) CHECK_OK(vpmm_pool_free(e, x, nullptr));
  CHECK_OK(vpmm_pool_trim(e, 0));
  c = 'g';
  CHECK(write(to_child[1], &c, 1) == 1);
  CHECK_EQ(wait_child(pid), 0);  // the trainer resumed with its bytes intact
  vpmm_pool_destroy(e);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
}

TEST("a member that does not answer is not waited for: the asker fails after the bounded wait, naming it") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_pool* p = join(name);
  CHECK(p != nullptr);
  if (!p) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 8 * kPage));
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = spawn({"holder", name, std::to_string(fds[1])});
  char ch = 0;
  CHECK(read(fds[0], &ch, 1) == 1);
  int st = 0;
  CHECK(waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st));
  void* b = nullptr;
  CHECK_EQ(vpmm_pool_malloc(p, 4 * kPage, nullptr, &b), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_MSG(std::strstr(vpmm_last_error(), "0 of 1 answered") != nullptr && std::strstr(vpmm_last_error(), "pid"),
            "%s", vpmm_last_error());
  // It leads with the ledger, not with the pool's capacity (1 GiB, not what refused).
  CHECK_MSG(std::strstr(vpmm_last_error(), "not admitted by the pool's ledger") != nullptr &&
                std::strstr(vpmm_last_error(), "capacity") == nullptr,
            "%s", vpmm_last_error());
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &b));  // what fits is still admitted
  bool shown = false;
  for (const vpmm_ledger_member& m : read_members(name))
    if (m.pid == static_cast<int32_t>(getpid()))
      shown = m.n_refused == 1 && m.n_pressure_asked == 1 && m.admission_wait_ns >= 2000000ull;
  CHECK(shown);  // the refused admission asked once and waited for the stopped member
  kill(pid, SIGKILL);
  wait_child(pid);
  vpmm_pool_destroy(p);
  close(fds[0]);
  close(fds[1]);
}

namespace {
// A member whose answer takes longer than the asker's first bound: its
// pressure callback waits 1.5 s, then frees what it held.
struct SlowAnswer {
  void* held = nullptr;
  std::atomic<int> calls{0};
};
void answer_slowly(vpmm_pool* pool, int under, uint64_t, void* user) {
  auto* a = static_cast<SlowAnswer*>(user);
  if (!under || !a->held) return;
  a->calls.fetch_add(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  void* held = a->held;
  a->held = nullptr;
  vpmm_pool_free(pool, held, nullptr);
}
}  // namespace

TEST("a member that took the request is waited for past the first bound: its slow answer admits the asker") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_pool* p = join(name);
  vpmm_pool* q = join(name);
  CHECK(p && q);
  if (!p || !q) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 8 * kPage));
  SlowAnswer answer;
  CHECK_OK(vpmm_pool_malloc(q, 6 * kPage, nullptr, &answer.held));
  CHECK_OK(vpmm_pool_set_pressure_callback(q, answer_slowly, &answer));
  const auto t0 = std::chrono::steady_clock::now();
  void* b = nullptr;
  const vpmm_status st = vpmm_pool_malloc(p, 4 * kPage, nullptr, &b);
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  CHECK_MSG(st == VPMM_OK, "%s", vpmm_last_error());
  CHECK_MSG(waited >= 1400, "waited %lld ms", static_cast<long long>(waited));  // past the 1 s bound, for it
  CHECK_EQ(answer.calls.load(), 1);
  // The asker may be admitted by the trim, before the watcher counts its
  // answer: the count follows within moments.
  uint64_t asked = 0, answered = 0;
  for (int look = 0; look < 500 && answered == 0; ++look) {
    if (look) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    asked = answered = 0;
    for (const vpmm_ledger_member& m : read_members(name)) {
      asked += m.n_pressure_asked;
      answered += m.n_pressure_answered;
    }
  }
  CHECK_EQ(asked, 1u);
  CHECK_EQ(answered, 1u);
  if (st == VPMM_OK) CHECK_OK(vpmm_pool_free(p, b, nullptr));
  CHECK_OK(vpmm_pool_set_pressure_callback(q, nullptr, nullptr));
  vpmm_pool_destroy(p);
  vpmm_pool_destroy(q);
}

TEST("the host budget: a pause whose backups would pass it fails with nothing paused; within it, it counts") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_pool* p = join(name);
  vpmm_pool* q = join(name);
  CHECK(p && q);
  if (!p || !q) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 64 * kPage));
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), VPMM_LEDGER_HOST, 10 * kPage));
  vpmm_alloc_attrs at;
  std::memset(&at, 0, sizeof at);
  at.struct_size = sizeof at;
  at.flags = VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_MMAP;  // pageable: nothing pinned stays cached
  at.tag = "a";
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc_ex(p, 8 * kPage, nullptr, &at, &a));
  at.tag = "b";
  void* b = nullptr;
  CHECK_OK(vpmm_pool_malloc_ex(q, 4 * kPage, nullptr, &at, &b));
  if (!a || !b) return;
  fill_pattern(a, 8 * kPage, 3);
  fill_pattern(b, 4 * kPage, 5);
  CHECK_OK(vpmm_pool_pause(p, "a"));  // 8 of 10 host pages
  vpmm_ledger_info info = read_info(name);
  CHECK(info.host_admitted_bytes >= 8 * kPage && info.host_admitted_bytes <= 10 * kPage);
  CHECK_EQ(vpmm_pool_pause(q, "b"), VPMM_ERR_OUT_OF_MEMORY);  // 8 + 4 > 10
  CHECK_MSG(std::strstr(vpmm_last_error(), "host budget") && std::strstr(vpmm_last_error(), "nothing was paused"),
            "%s", vpmm_last_error());
  vpmm_tag_stats ts;
  std::memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  CHECK_OK(vpmm_pool_tag_stats(q, "b", &ts));
  CHECK_EQ(ts.paused_bytes, 0u);
  CHECK(pattern_ok(b, 4 * kPage, 5));  // nothing lost: still active, still its bytes
  CHECK_OK(vpmm_pool_resume(p, "a"));  // the mmap backup goes: the host budget is free again
  CHECK(pattern_ok(a, 8 * kPage, 3));
  CHECK_OK(vpmm_pool_pause(q, "b"));
  CHECK_OK(vpmm_pool_resume(q, "b"));
  CHECK(pattern_ok(b, 4 * kPage, 5));
  vpmm_pool_destroy(p);
  vpmm_pool_destroy(q);
  CHECK_EQ(read_info(name).host_admitted_bytes, 0u);
}

TEST("the host budget's disk fallback: a member that allowed it pauses to disk, bytes intact after resume") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_pool* p = join(name);
  vpmm_pool* q = join(name);
  CHECK(p && q);
  if (!p || !q) return;
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), 0, 64 * kPage));
  CHECK_OK(vpmm_ledger_set_budget(name.c_str(), VPMM_LEDGER_HOST, 10 * kPage));
  vpmm_alloc_attrs at;
  std::memset(&at, 0, sizeof at);
  at.struct_size = sizeof at;
  at.flags = VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_MMAP;
  at.tag = "a";
  void* a = nullptr;
  CHECK_OK(vpmm_pool_malloc_ex(p, 8 * kPage, nullptr, &at, &a));
  at.flags = VPMM_ALLOC_HOST_BACKUP;  // pinned: a host store, which the fallback replaces
  at.tag = "b";
  void* b = nullptr;
  CHECK_OK(vpmm_pool_malloc_ex(q, 4 * kPage, nullptr, &at, &b));
  if (!a || !b) return;
  fill_pattern(a, 8 * kPage, 3);
  fill_pattern(b, 4 * kPage, 5);
  CHECK_OK(vpmm_pool_pause(p, "a"));  // 8 of 10 host pages
  vpmm_tag_stats ts;
  std::memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  // Allowed, but no backup directory: the refusal stands, saying so.
  CHECK_OK(vpmm_pool_ledger_set_fallback(q, VPMM_LEDGER_FALLBACK_DISK));
  CHECK_EQ(vpmm_pool_pause(q, "b"), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_MSG(std::strstr(vpmm_last_error(), "host budget") && std::strstr(vpmm_last_error(), "no backup directory"),
            "%s", vpmm_last_error());
  CHECK_OK(vpmm_pool_tag_stats(q, "b", &ts));
  CHECK_EQ(ts.paused_bytes, 0u);
  CHECK(pattern_ok(b, 4 * kPage, 5));
  // With a directory: the pause goes to disk, the host budget untouched.
  char dir[] = "/tmp/vt-ledger-disk-XXXXXX";
  CHECK(mkdtemp(dir) != nullptr);
  CHECK_OK(vpmm_pool_set_backup_dir(q, dir));
  CHECK_OK(vpmm_pool_pause(q, "b"));
  CHECK_OK(vpmm_pool_tag_stats(q, "b", &ts));
  CHECK_EQ(ts.paused_bytes, 4 * kPage);
  vpmm_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(vpmm_pool_stats(q, &st));
  CHECK_EQ(st.backup_disk_bytes, 4 * kPage);
  CHECK_EQ(st.backup_pinned_bytes + st.backup_pageable_bytes + st.backup_mmap_bytes, 0u);
  vpmm_ledger_info info = read_info(name);
  CHECK(info.host_admitted_bytes >= 8 * kPage && info.host_admitted_bytes <= 10 * kPage);  // p's only
  CHECK_OK(vpmm_pool_resume(q, "b"));
  CHECK(pattern_ok(b, 4 * kPage, 5));
  CHECK_OK(vpmm_pool_resume(p, "a"));
  CHECK(pattern_ok(a, 8 * kPage, 3));
  // Off again: a refusal is a refusal (p's pause holds 8 pages meanwhile).
  CHECK_OK(vpmm_pool_pause(p, "a"));
  void* c = nullptr;
  at.tag = "c";
  CHECK_OK(vpmm_pool_malloc_ex(q, 4 * kPage, nullptr, &at, &c));
  CHECK_OK(vpmm_pool_ledger_set_fallback(q, 0));
  CHECK_EQ(vpmm_pool_pause(q, "c"), VPMM_ERR_OUT_OF_MEMORY);
  CHECK_OK(vpmm_pool_resume(p, "a"));
  // Bad input.
  CHECK_EQ(vpmm_pool_ledger_set_fallback(q, 0x80), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_pool_ledger_set_fallback(nullptr, VPMM_LEDGER_FALLBACK_DISK), VPMM_ERR_INVALID_ARGUMENT);
  vpmm_config hc = host_config();
  vpmm_pool* solo = nullptr;
  CHECK_OK(vpmm_pool_create(&hc, &solo));
  CHECK_EQ(vpmm_pool_ledger_set_fallback(solo, VPMM_LEDGER_FALLBACK_DISK), VPMM_ERR_WRONG_STATE);
  vpmm_pool_destroy(solo);
  vpmm_pool_destroy(p);
  vpmm_pool_destroy(q);
  rmdir(dir);
}

TEST("a segment that is not the user's own 0600 file is refused") {
  const std::string name = fresh_name();
  NameGuard g{name};
  const std::string shm = "/vpmm.ledger." + name;
  int fd = shm_open(shm.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK(fd >= 0);
  CHECK(ftruncate(fd, static_cast<off_t>(vpmm::ledger::kSegmentBytes)) == 0);
  CHECK(fchmod(fd, 0644) == 0);
  vpmm_config c = host_config();
  vpmm_pool* p = nullptr;
  CHECK_EQ(vpmm_pool_create_ledger(&c, name.c_str(), &p), VPMM_ERR_WRONG_STATE);
  CHECK(std::strstr(vpmm_last_error(), "0600") != nullptr);
  CHECK(p == nullptr);
  // 0600 but never initialised (its creator died before the magic): refused
  // after a bounded wait, with a hint.
  CHECK(fchmod(fd, 0600) == 0);
  CHECK_EQ(vpmm_pool_create_ledger(&c, name.c_str(), &p), VPMM_ERR_WRONG_STATE);
  CHECK(std::strstr(vpmm_last_error(), "magic") != nullptr);
  close(fd);
  // A symbolic link is not followed.
  vpmm_ledger_remove(name.c_str());
  const std::string link = "/dev/shm/vpmm.ledger." + name;
  CHECK(symlink("/dev/null", link.c_str()) == 0);
  CHECK_EQ(vpmm_pool_create_ledger(&c, name.c_str(), &p), VPMM_ERR_WRONG_STATE);
  unlink(link.c_str());
  // Bad names are refused before anything is opened.
  CHECK_EQ(vpmm_pool_create_ledger(&c, "../etc", &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_pool_create_ledger(&c, ".hidden", &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(vpmm_ledger_read("no-such-ledger-here", 0, nullptr, nullptr, 0, nullptr), VPMM_ERR_INVALID_ARGUMENT);
}

TEST("config.ledger makes vpmm_pool_create join; vpmm_pool_get_config reports the pool's copy") {
  const std::string name = fresh_name();
  NameGuard g{name};
  vpmm_config c = host_config();
  CHECK(c.ledger == nullptr);  // off by default
  std::string owned = name;    // the caller's string, gone after the create
  c.ledger = owned.c_str();
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  owned.assign(owned.size(), 'x');
  CHECK_EQ(read_info(name).n_members, 1u);
  vpmm_config got;
  got.struct_size = sizeof got;
  CHECK_OK(vpmm_pool_get_config(p, &got));
  CHECK(got.ledger != nullptr && name == got.ledger);
  // A name given to vpmm_pool_create_ledger wins over the field.
  const std::string other = fresh_name();
  NameGuard g2{other};
  vpmm_pool* q = nullptr;
  CHECK_OK(vpmm_pool_create_ledger(&c, other.c_str(), &q));
  CHECK_EQ(read_info(other).n_members, 1u);
  CHECK_OK(vpmm_pool_get_config(q, &got));
  CHECK(got.ledger != nullptr && other == got.ledger);
  vpmm_pool_destroy(q);
  vpmm_pool_destroy(p);
  CHECK_EQ(read_info(name).n_members, 0u);
  // A bad name: refused before anything is made, naming the field.
  for (const char* bad : {"../etc", ".hidden", "a/b"}) {
    c.ledger = bad;
    CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
    CHECK(p == nullptr);
    CHECK(std::strstr(vpmm_last_error(), "config->ledger") != nullptr);
  }
  // "" is none, as NULL is.
  c.ledger = "";
  CHECK_OK(vpmm_pool_create(&c, &p));
  CHECK_OK(vpmm_pool_get_config(p, &got));
  CHECK(got.ledger == nullptr);
  vpmm_pool_destroy(p);
  // A caller built before the field (struct_size 176) joins nothing.
  c.ledger = name.c_str();
  c.struct_size = 176;
  CHECK_OK(vpmm_pool_create(&c, &p));
  vpmm_ledger_info info;
  info.struct_size = sizeof info;
  CHECK(vpmm_ledger_read(name.c_str(), 0, &info, nullptr, 0, nullptr) != VPMM_OK || info.n_members == 0);
  vpmm_pool_destroy(p);
}

TEST("VPMM_LEDGER is the ledger option's variable: vpmm_config_init reads it once, _init_defaults does not") {
  const std::string name = fresh_name();
  NameGuard g{name};
  setenv("VPMM_LEDGER", name.c_str(), 1);
  vpmm_config c;
  CHECK_OK(vpmm_config_init_sized(&c, sizeof c, 0));
  CHECK(c.config_error == 0);
  CHECK(c.ledger != nullptr && name == c.ledger);
  unsetenv("VPMM_LEDGER");  // read once: the config keeps the library's copy
  CHECK(c.ledger != nullptr && name == c.ledger);
  vpmm_config d;
  setenv("VPMM_LEDGER", name.c_str(), 1);
  CHECK_OK(vpmm_config_init_sized(&d, sizeof d, VPMM_CONFIG_DEFAULTS_ONLY));
  CHECK(d.ledger == nullptr);
  setenv("VPMM_LEDGER", "no/slash", 1);
  CHECK_OK(vpmm_config_init_sized(&d, sizeof d, 0));
  CHECK(d.config_error != 0);
  d.backend = VPMM_BACKEND_HOST;
  vpmm_pool* p = nullptr;
  CHECK_EQ(vpmm_pool_create(&d, &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "VPMM_LEDGER") != nullptr);
  unsetenv("VPMM_LEDGER");
  vpmm_option_info o;
  o.struct_size = sizeof o;
  CHECK_OK(vpmm_option_find("VPMM_LEDGER", &o, nullptr));
  CHECK_EQ(o.field_offset, uint32_t(offsetof(vpmm_config, ledger)));
  CHECK_EQ(o.field_size, uint32_t(sizeof(const char*)));
}

TEST("VPMM_LEDGER makes vpmm_pool_create join, VPMM_LEDGER_BUDGET sets the first member's budget") {
  const std::string name = fresh_name();
  NameGuard g{name};
  setenv("VPMM_LEDGER", name.c_str(), 1);
  setenv("VPMM_LEDGER_BUDGET", "50%", 1);
  vpmm_config c;
  CHECK_OK(vpmm_config_init_sized(&c, sizeof c, 0));  // the environment's ledger, and the test's fields
  const vpmm_config h = host_config();
  std::memcpy(&c, &h, offsetof(vpmm_config, ledger));
  vpmm_pool* p = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));
  const vpmm_ledger_info info = read_info(name);
  CHECK_EQ(info.n_members, 1u);
  CHECK_EQ(info.budget_bytes, (256ull << 20) / 2);  // half the host backend's capacity
  vpmm_pool_destroy(p);
  setenv("VPMM_LEDGER_BUDGET", "lots", 1);
  vpmm_ledger_remove(name.c_str());
  CHECK_EQ(vpmm_pool_create(&c, &p), VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "VPMM_LEDGER_BUDGET") != nullptr);
  unsetenv("VPMM_LEDGER");
  unsetenv("VPMM_LEDGER_BUDGET");
  c.ledger = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &p));  // no ledger: nothing asked
  vpmm_pool_destroy(p);
}

namespace {
// The exec'd children (spawn): argv = --child ROLE ARGS...
int child_main(int argc, char** argv) {
  const std::string role = argv[2];
  const std::string name = argc > 3 ? argv[3] : "";
  if (role == "hammer" && argc == 9) {  // NAME BUDGET THREADS ROUNDS SEED SHARED_FD
    Shared* sh = map_shared(std::atoi(argv[8]));
    vpmm_pool* c = join(name);
    if (!c || !sh) return 2;
    sh->ready.fetch_add(1);
    hammer(c, sh, std::strtoull(argv[4], nullptr, 10), std::atoi(argv[5]), std::atoi(argv[6]),
           static_cast<unsigned>(std::atoi(argv[7])));
    vpmm_pool_destroy(c);
    return 0;
  }
  if (role == "trainer" && argc == 6) {  // NAME FROM_PARENT_FD TO_PARENT_FD
    const int from = std::atoi(argv[4]), to = std::atoi(argv[5]);
    const uint64_t weights = 12 * kPage;
    vpmm_pool* t = join(name);
    if (!t) return 2;
    vpmm_pool_set_pressure_callback(t, count_pressure, nullptr);
    vpmm_alloc_attrs at;
    std::memset(&at, 0, sizeof at);
    at.struct_size = sizeof at;
    at.tag = "weights";
    at.flags = VPMM_ALLOC_HOST_BACKUP;
    void* w = nullptr;
    if (vpmm_pool_malloc_ex(t, weights, nullptr, &at, &w) != VPMM_OK) return 3;
    fill_pattern(w, weights, 7);
    const char* tags[] = {"weights"};
    if (vpmm_pool_ledger_evictable(t, tags, 1) != VPMM_OK) return 4;
    char c = 'r';
    if (write(to, &c, 1) != 1) return 5;
    if (read(from, &c, 1) != 1) return 6;  // the engine is done: take the weights back
    if (vpmm_pool_resume(t, "weights") != VPMM_OK) return 7;
    if (!pattern_ok(w, weights, 7)) return 8;
    if (g_pressure_calls.load() < 1) return 9;  // it heard of the pressure through its callback
    vpmm_pool_destroy(t);
    return 0;
  }
  if (role == "holder" && argc == 5) {  // NAME TO_PARENT_FD
    vpmm_pool* c = join(name);
    void* a = nullptr;
    if (!c || vpmm_pool_malloc(c, 6 * kPage, nullptr, &a) != VPMM_OK) return 2;
    char ch = 1;
    if (write(std::atoi(argv[4]), &ch, 1) != 1) return 3;
    raise(SIGSTOP);  // alive, holding 6 pages, answering nothing
    return 0;
  }
  return 100;
}
}  // namespace

int main(int argc, char** argv) {
  unsetenv("VPMM_BACKUP_DIR");  // the disk fallback's case sets the pool's own
  unsetenv("VPMM_LEDGER");
  unsetenv("VPMM_LEDGER_BUDGET");
  if (argc >= 3 && std::strcmp(argv[1], "--child") == 0) return child_main(argc, argv);
  return vt::run_all(argc, argv);
}
