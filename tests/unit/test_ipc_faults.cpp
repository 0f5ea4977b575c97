// A failed export or import leaves nothing behind: every backend call an
// export makes (export_handle) and every call an import makes (reserve,
// import_handle, map, set_access) is failed in turn through the fault
// backend (tests/support/), on the host backend. After each failure the
// status is the injected one, both pools pass their check, and once they are
// destroyed every live-object counter of both backends is zero and the
// process holds no memfd or mapping of a handle or status page.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/exported_fds.hpp"
#include "backend/registry.hpp"
#include "check.hpp"
#include "core/pool.hpp"
#include "ipc/channels.hpp"
#include "ipc/descriptor.hpp"
#include "ipc/status_page.hpp"
#include "ipc_harness.hpp"
#include "support/fault_backend.hpp"

namespace {

using vpmm::Backend;
using vpmm::FaultBackend;
using vpmm::FaultControl;
using vpmm::FaultPlan;
using vpmm::Op;
using vpmm::Pool;
using vpmm::PoolOptions;

constexpr uint64_t kPage = 64 << 10;

struct Side {
  std::shared_ptr<Backend> host;
  std::shared_ptr<FaultControl> ctl = std::make_shared<FaultControl>();
  std::unique_ptr<Pool> pool;
  explicit Side(bool exportable) {
    vpmm::BackendParams bp;
    bp.exportable = exportable;
    bp.host_capacity = 64ull << 20;
    vpmm_status st = VPMM_OK;
    host = vpmm::make_shared_host_backend(bp, &st);
    PoolOptions o;
    o.page_size = kPage;
    o.va_size = 256 * kPage;
    Pool::create(std::unique_ptr<Backend>(new FaultBackend(host, ctl)), o, &pool);
  }
};

void* tagged(Pool& p, uint64_t size) {
  void* out = nullptr;
  p.malloc("test", size, nullptr, "w", 0, nullptr, &out);
  return out;
}

// One scenario: exporter and importer pools, three tagged allocations
// exported together; `fail_kind` fails its nth call on the side it belongs to.
void scenario(int fail_kind, uint64_t nth, bool on_import) {
  Side ex(true), im(false);
  CHECK(ex.pool && im.pool);
  if (!ex.pool || !im.pool) return;
  for (uint64_t pages : {1, 3, 2}) CHECK(tagged(*ex.pool, pages * kPage) != nullptr);
  std::unique_ptr<vpmm::ipc::StatusPage> page;
  CHECK_OK(vpmm::ipc::StatusPage::create("test", &page));
  auto channel = std::make_shared<vpmm::ipc::Exporter>(std::move(page));
  vpmm::ExportLayout layout;
  uint64_t id = 0;
  if (!on_import) ex.ctl->arm(FaultPlan{nth, fail_kind, VPMM_ERR_BACKEND});
  vpmm_status st = ex.pool->export_memory("test", {}, "w", true, channel, &layout, &id);
  ex.ctl->disarm();
  if (!on_import) {
    CHECK_EQ(st, nth <= 3 ? VPMM_ERR_BACKEND : VPMM_OK);
    if (st != VPMM_OK) {
      channel.reset();  // a failed export's channel closes what it adopted
      CHECK_EQ(vt::held(getpid(), "vpmm-handle").fds, 3);  // the pool's own three handles, no more
    }
  }
  if (st == VPMM_OK) {
    std::string bytes;
    std::vector<int> fds;
    CHECK_OK(channel->with_descriptor("test", layout, [&](const std::string& b, const std::vector<int>& f) {
      bytes = b;
      fds = f;
      return VPMM_OK;
    }));
    vpmm::ipc::Descriptor d;
    CHECK_OK(vpmm::ipc::decode("test", bytes.data(), bytes.size(), &d));
    d.request.fds.assign(fds.begin() + 2, fds.end());
    std::unique_ptr<vpmm::ipc::StatusPage> mine;
    CHECK_OK(vpmm::ipc::StatusPage::open("test", fds[0], fds[1], d.request.nonce, &mine));
    auto imp = std::make_shared<vpmm::ipc::Importer>(std::move(mine));
    uint64_t iid = 0;
    std::vector<uint64_t> ptrs;
    if (on_import) im.ctl->arm(FaultPlan{nth, fail_kind, VPMM_ERR_BACKEND});
    vpmm_status is = im.pool->import_memory("test", d.request, imp, &iid, &ptrs);
    im.ctl->disarm();
    if (on_import) {
      const bool injected = im.ctl->injected() > 0;
      CHECK_MSG(is == (injected ? VPMM_ERR_BACKEND : VPMM_OK), "%s #%llu: import returned %d",
                vpmm::fault_kind_name(fail_kind), static_cast<unsigned long long>(nth), is);
      if (nth == 1) CHECK(injected);  // every kind is called at least once
    }
    if (is == VPMM_OK) {
      CHECK_EQ(ptrs.size(), size_t(3));
      CHECK_OK(im.pool->close_import("test", iid));
    }
    // A failed import took nothing: the export counts no importer.
    CHECK_EQ(channel->live_importers(), 0u);
    CHECK_OK(ex.pool->close_export("test", id));
  }
  CHECK(ex.pool->check().empty());
  CHECK(im.pool->check().empty());
  ex.pool.reset();
  im.pool.reset();
  channel.reset();
  CHECK_MSG(vpmm::live_counts_zero(ex.host->counters()), "exporter: %s", vpmm::live_counts(ex.host->counters()).c_str());
  CHECK_MSG(vpmm::live_counts_zero(im.host->counters()), "importer: %s", vpmm::live_counts(im.host->counters()).c_str());
}

TEST("a failed export leaves no descriptor and the pool as it was") {
  for (uint64_t nth = 1; nth <= 4; ++nth) scenario(static_cast<int>(Op::export_handle), nth, false);
  vt::Held h = vt::held_libvpmm(getpid());
  CHECK_MSG(h.none(), "%d memfds, %d mappings left", h.fds, h.maps);
}

TEST("a failed prepared export reports the first failure and prepares the other handles") {
  Side ex(true);
  for (uint64_t pages : {1, 3, 2}) CHECK(tagged(*ex.pool, pages * kPage) != nullptr);
  for (uint64_t nth = 1; nth <= 3; ++nth) {
    ex.ctl->arm(FaultPlan{nth, static_cast<int>(Op::export_handle), VPMM_ERR_BACKEND});
    uint64_t n = 0;
    CHECK_EQ(ex.pool->prepare_export("test", "w", &n), VPMM_ERR_BACKEND);
    ex.ctl->disarm();
    CHECK_EQ(n, 2u);
  }
  CHECK(ex.pool->check().empty());
}

TEST("a failed import leaves nothing mapped, reserved or open on either side") {
  for (Op kind : {Op::reserve, Op::import_handle, Op::map, Op::set_access})
    for (uint64_t nth = 1; nth <= 4; ++nth) scenario(static_cast<int>(kind), nth, true);
  vt::Held h = vt::held_libvpmm(getpid());
  CHECK_MSG(h.none(), "%d memfds, %d mappings left", h.fds, h.maps);
}

// What a GPU backend keeps of its exports (backend/exported_fds.hpp): the
// driver's descriptor of a handle, once; every export a duplicate of it (the
// same file), the caller's to close; closed at the handle's release; an
// export that finishes after the handle was released (its value perhaps the
// driver's again, for new memory) keeps nothing.
TEST("a GPU backend exports a handle once: later exports duplicate it, its release closes it") {
  const int before = vt::held(getpid(), "vpmm-handle").fds;
  auto driver_export = [] { return memfd_create("vpmm-handle", MFD_CLOEXEC); };
  {
    vpmm::ExportedFds kept;
    int out = -1;
    vpmm_status st = VPMM_ERR_INTERNAL;
    CHECK(!kept.dup_kept(7, &out, &st, "test"));  // nothing kept yet: the driver exports
    uint64_t g = kept.begin(7);
    const int driver = driver_export();
    CHECK_OK(kept.finish(7, g, driver, &out, "test"));
    CHECK(out >= 0 && out != driver);
    int again = -1;
    CHECK(kept.dup_kept(7, &again, &st, "test"));
    CHECK_OK(st);
    struct stat a, b;
    CHECK(fstat(out, &a) == 0 && fstat(again, &b) == 0 && a.st_ino == b.st_ino);  // the same file
    CHECK(kept.dup_kept(7, nullptr, &st, "test"));  // prepared: nothing handed out
    // Two exports racing: the first kept wins, the other's descriptor is closed.
    g = kept.begin(7);
    int third = -1;
    CHECK_OK(kept.finish(7, g, driver_export(), &third, "test"));
    CHECK(fstat(third, &b) == 0 && a.st_ino == b.st_ino);
    for (int fd : {out, again, third}) close(fd);
    CHECK_EQ(vt::held(getpid(), "vpmm-handle").fds, before + 1);  // the kept one
    kept.forget(7);  // released
    CHECK_EQ(vt::held(getpid(), "vpmm-handle").fds, before);
    CHECK(!kept.dup_kept(7, &out, &st, "test"));
    // Released while its export ran: the export keeps nothing, even when the
    // value names a new handle by the time it finishes.
    g = kept.begin(9);
    kept.forget(9);
    CHECK_EQ(kept.finish(9, g, driver_export(), nullptr, "test"), VPMM_ERR_WRONG_STATE);
    CHECK(!kept.dup_kept(9, &out, &st, "test"));
    CHECK_EQ(vt::held(getpid(), "vpmm-handle").fds, before);
    g = kept.begin(9);  // a failed driver call: nothing to keep, nothing in flight after
    kept.abandon(9);
    g = kept.begin(9);
    CHECK_OK(kept.finish(9, g, driver_export(), nullptr, "test"));  // prepared ahead
    CHECK(kept.dup_kept(9, &out, &st, "test"));
    close(out);
  }
  CHECK_EQ(vt::held(getpid(), "vpmm-handle").fds, before);  // the destructor closed handle 9's
}

// What a GPU backend remembers of its imports (backend/exported_fds.hpp):
// a later descriptor of the same open file (a duplicate, what a kept export
// hands out) is the same memory; another file (even of equal size) is not;
// a released handle is nothing.
TEST("a GPU backend recognises a descriptor of memory it already imported by its open file") {
  const int before = vt::held(getpid(), "vpmm-handle").fds;
  {
    vpmm::ImportedFds imported;
    const int exported = memfd_create("vpmm-handle", MFD_CLOEXEC);
    const int other = memfd_create("vpmm-handle", MFD_CLOEXEC);
    imported.keep(5, exported);
    const int again = fcntl(exported, F_DUPFD_CLOEXEC, 0);  // the same export sent again
    const bool kcmp_works = imported.same(5, again);
    if (!kcmp_works) std::printf("  kcmp refused here: nothing is recognised (a fresh mapping each time)\n");
    CHECK(!imported.same(5, other));
    CHECK(!imported.same(6, again));
    close(exported);  // the importer closes what it received; the kept duplicate stays
    if (kcmp_works) CHECK(imported.same(5, again));
    imported.forget(5);
    CHECK(!imported.same(5, again));
    for (int fd : {again, other}) close(fd);
    const int seven = memfd_create("vpmm-handle", MFD_CLOEXEC);
    imported.keep(7, seven);
    close(seven);
    CHECK_EQ(vt::held(getpid(), "vpmm-handle").fds, before + 1);  // the kept duplicate
  }
  CHECK_EQ(vt::held(getpid(), "vpmm-handle").fds, before);  // closed by the destructor
}

}  // namespace

TEST_MAIN()
