// The placement seam (core/alloc/placement.hpp), proved with policies that
// live only in this test:
//  - a policy sees every page-level request, allocation and free in order,
//    with sequence numbers, sizes, streams and the ids that pair a free with
//    its allocation; one that declines everything leaves the layout exactly
//    as the default phases make it;
//  - a policy that serves requests itself (the highest-addressed free region
//    that fits, not best fit) places them where it says, and the pool's
//    invariants hold;
//  - a policy may work at free time: one that assembles a span for the next
//    request of the size just freed makes that request a Phase 1 hit;
//  - a region a policy returns that cannot hold the request fails the malloc
//    with INTERNAL and changes nothing;
//  - the registry: unknown names fail pool creation, names are unique,
//    "default" is no policy.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/registry.hpp"
#include "check.hpp"
#include "common/status.hpp"
#include "core/alloc/placement.hpp"
#include "core/pool.hpp"
#include "core/state/layout.hpp"

namespace {

using vpmm::PageFree;
using vpmm::PageRequest;
using vpmm::PlacementOps;
using vpmm::PlacementPolicy;
using vpmm::Pool;
using vpmm::PoolOptions;
using vpmm::RegionIt;

constexpr uint64_t kPage = 64 << 10;

// What the logging policy saw, one line per call.
std::vector<std::string>& seen() {
  static std::vector<std::string> v;
  return v;
}
std::string line(const char* what, uint64_t seq, uint64_t va, uint64_t bytes, uint64_t id) {
  return std::string(what) + " seq=" + std::to_string(seq) + " va=" + std::to_string(va) +
         " pages=" + std::to_string(bytes / kPage) + " id=" + std::to_string(id);
}

// Declines every request; logs what it is told.
class LogPolicy : public PlacementPolicy {
 public:
  vpmm_status place(const PageRequest& r, PlacementOps&, RegionIt*) override {
    seen().push_back(line("place", r.seq, 0, r.bytes, 0));
    return kDecline;
  }
  void placed(const PageRequest& r, uint64_t va, uint64_t id) override {
    seen().push_back(line("placed", r.seq, va, r.bytes, id));
  }
  void freed(const PageFree& f, PlacementOps&) override { seen().push_back(line("freed", f.seq, f.va, f.bytes, f.id)); }
};

// Serves each request from the free region with the highest address that
// fits and that the request's stream may use.
class HighestPolicy : public PlacementPolicy {
 public:
  vpmm_status place(const PageRequest& r, PlacementOps& ops, RegionIt* out) override {
    const auto& regions = ops.regions().regions();
    for (auto it = regions.rbegin(); it != regions.rend(); ++it)
      if (it->second.kind == vpmm::Kind::Free && it->second.size >= r.bytes && ops.usable(it->first, r.stream)) {
        // A RegionIt from the map the allocator owns: the const view names it.
        *out = const_cast<vpmm::RegionMap&>(ops.regions()).find(it->first);
        return VPMM_OK;
      }
    return kDecline;
  }
};

// Returns the first region of the map whatever it is: a broken policy.
class BrokenPolicy : public PlacementPolicy {
 public:
  vpmm_status place(const PageRequest&, PlacementOps& ops, RegionIt* out) override {
    *out = const_cast<vpmm::RegionMap&>(ops.regions()).begin();
    return VPMM_OK;
  }
};

// At each free, assembles a free span for the next request of the size just
// freed twice over (a hole prepared in the free's time), and says whether it
// got one.
std::vector<bool>& assembled() {
  static std::vector<bool> v;
  return v;
}
class PreparePolicy : public PlacementPolicy {
 public:
  vpmm_status place(const PageRequest&, PlacementOps&, RegionIt*) override { return kDecline; }
  void freed(const PageFree& f, PlacementOps& ops) override {
    RegionIt r;
    vpmm_status st = ops.assemble(2 * f.bytes, f.stream, &r);
    assembled().push_back(st == VPMM_OK && r->second.kind == vpmm::Kind::Free && r->second.size >= 2 * f.bytes);
  }
};

template <typename P>
std::unique_ptr<PlacementPolicy> make(const PoolOptions&) {
  return std::unique_ptr<PlacementPolicy>(new P);
}

bool register_test_policies() {
  static const bool ok = vpmm::register_placement({"test-log", make<LogPolicy>, "logs, declines"}) &&
                         vpmm::register_placement({"test-highest", make<HighestPolicy>, "highest address"}) &&
                         vpmm::register_placement({"test-broken", make<BrokenPolicy>, "broken"}) &&
                         vpmm::register_placement({"test-prepare", make<PreparePolicy>, "prepares at free"});
  return ok;
}

std::unique_ptr<Pool> make_pool(const char* policy, uint64_t initial_pages = 16, vpmm_status* out_st = nullptr) {
  register_test_policies();
  vpmm::BackendParams bp;
  bp.host_capacity = 256 * kPage;
  vpmm_status st = VPMM_OK;
  std::unique_ptr<vpmm::Backend> b = vpmm::make_backend(VPMM_BACKEND_HOST, bp, &st);
  CHECK(b != nullptr);
  PoolOptions o;
  o.page_size = kPage;
  o.va_size = 64 * kPage;
  o.initial_pages = initial_pages;
  o.small_size = 0;  // every request is page level
  o.policy = policy;
  std::unique_ptr<Pool> pool;
  st = Pool::create(std::move(b), o, &pool);
  if (out_st) *out_st = st;
  return pool;
}

std::string layout(Pool& p) { return vpmm::format_layout(p.snapshot(), kPage); }

void* alloc(Pool& p, uint64_t pages) {
  void* out = nullptr;
  CHECK_OK(p.malloc("test", pages * kPage, nullptr, nullptr, 0, nullptr, &out));
  return out;
}

uint64_t va(void* p) { return reinterpret_cast<uint64_t>(p); }

// a=3p, b=1p, free a, c=2p, free b, free c: the seed's kind of sequence.
std::string run_sequence(Pool& p, uint64_t* vas) {
  void* a = alloc(p, 3);
  void* b = alloc(p, 1);
  CHECK_OK(p.free(a, nullptr));
  void* c = alloc(p, 2);
  const std::string mid = layout(p);
  CHECK_OK(p.free(b, nullptr));
  CHECK_OK(p.free(c, nullptr));
  vas[0] = va(a), vas[1] = va(b), vas[2] = va(c);
  return mid;
}

TEST("a policy sees every page-level request, allocation and free in order, and declining changes nothing") {
  uint64_t base_vas[3], log_vas[3];
  std::unique_ptr<Pool> base = make_pool(nullptr);
  std::unique_ptr<Pool> logged = make_pool("test-log");
  if (!base || !logged) return;
  seen().clear();
  const std::string base_mid = run_sequence(*base, base_vas);
  CHECK(seen().empty());  // no policy: nothing is told
  const std::string log_mid = run_sequence(*logged, log_vas);
  CHECK_EQ(log_mid, base_mid);
  CHECK_EQ(layout(*logged), layout(*base));
  for (int i = 0; i < 3; ++i) CHECK_EQ(log_vas[i] - log_vas[0], base_vas[i] - base_vas[0]);
  // The ids: a's free carries the id its placement reported, and so on.
  const uint64_t a = log_vas[0], b = log_vas[1], c = log_vas[2];
  std::vector<std::string> want = {
      line("place", 1, 0, 3 * kPage, 0), line("placed", 1, a, 3 * kPage, 1),
      line("place", 2, 0, 1 * kPage, 0), line("placed", 2, b, 1 * kPage, 2),
      line("freed", 3, a, 3 * kPage, 1),
      line("place", 4, 0, 2 * kPage, 0), line("placed", 4, c, 2 * kPage, 4),
      line("freed", 5, b, 1 * kPage, 2),
      line("freed", 6, c, 2 * kPage, 4),
  };
  CHECK_EQ(seen().size(), want.size());
  for (size_t i = 0; i < want.size() && i < seen().size(); ++i) CHECK_MSG(seen()[i] == want[i], "%s != %s", seen()[i].c_str(), want[i].c_str());
  CHECK_EQ(logged->check(), std::string());
}

TEST("a policy that serves requests places them where it says") {
  std::unique_ptr<Pool> base = make_pool(nullptr);
  std::unique_ptr<Pool> high = make_pool("test-highest");
  if (!base || !high) return;
  for (Pool* p : {base.get(), high.get()}) {
    void* a = alloc(*p, 2);
    void* b = alloc(*p, 2);
    void* c = alloc(*p, 2);
    std::memset(b, 0x5a, 2 * kPage);
    CHECK_OK(p->free(a, nullptr));
    CHECK_OK(p->free(c, nullptr));
    alloc(*p, 2);
    CHECK_EQ(static_cast<unsigned char*>(b)[2 * kPage - 1], 0x5a);
    CHECK_EQ(p->check(), std::string());
  }
  // Best fit reuses the exact hole at the front; the policy the highest
  // free region (the tail after b).
  CHECK_EQ(layout(*base), std::string("[2][2][-12][*48]"));
  CHECK_EQ(layout(*high), std::string("[-2][2][2][-10][*48]"));
}

TEST("a policy may prepare memory at free time: the next request of that size needs no remap") {
  std::unique_ptr<Pool> p = make_pool("test-prepare", 0);
  if (!p) return;
  assembled().clear();
  // [1][1][1] over growths, then free the middle: the policy assembles a
  // free span of 2 pages for stream NULL right away.
  void* a = alloc(*p, 1);
  void* b = alloc(*p, 1);
  void* c = alloc(*p, 1);
  (void)a, (void)c;
  CHECK_OK(p->free(b, nullptr));
  CHECK_EQ(assembled().size(), size_t(1));
  CHECK(!assembled().empty() && assembled()[0]);
  vpmm_stats before, after;
  p->stats(&before);
  alloc(*p, 2);
  p->stats(&after);
  CHECK_EQ(after.n_defrag, before.n_defrag);  // Phase 1 found the prepared span
  CHECK_EQ(after.n_grow, before.n_grow);
  CHECK_EQ(p->check(), std::string());
}

TEST("a region a policy returns that cannot hold the request fails the malloc, changing nothing") {
  std::unique_ptr<Pool> p = make_pool("test-broken", 16);
  if (!p) return;
  void* a = alloc(*p, 2);  // the broken policy hands out the first region: a free one here
  CHECK(a != nullptr);
  const std::string before = layout(*p);
  void* out = nullptr;
  vpmm_status st = p->malloc("test", 2 * kPage, nullptr, nullptr, 0, nullptr, &out);
  CHECK_EQ(st, VPMM_ERR_INTERNAL);
  CHECK(std::strstr(vpmm_last_error(), "test-broken") != nullptr);
  CHECK_EQ(layout(*p), before);
  CHECK_EQ(p->check(), std::string());
}

TEST("the registry: unknown names fail pool creation, names are unique, default is no policy") {
  register_test_policies();
  vpmm_status st = VPMM_OK;
  std::unique_ptr<Pool> p = make_pool("no-such-policy", 0, &st);
  CHECK(!p);
  CHECK_EQ(st, VPMM_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(vpmm_last_error(), "no-such-policy") != nullptr);
  CHECK(!vpmm::register_placement({"test-log", make<LogPolicy>, "again"}));
  CHECK(!vpmm::register_placement({"default", make<LogPolicy>, "again"}));
  const vpmm::PlacementEntry* d = vpmm::find_placement("default");
  CHECK(d != nullptr && d->make == nullptr);
  CHECK(vpmm::find_placement(nullptr) == d);
  CHECK(make_pool("default") != nullptr);
}

}  // namespace

int main(int argc, char** argv) { return vt::run_all(argc, argv); }
