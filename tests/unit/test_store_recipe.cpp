// The recipe for a new backup store (docs/design.md, "Adding a backup
// store"), proved by a store that lives only in this test: a BackupStore
// keeping each backup in a std::vector, staged through the pinned slots,
// registered with one call (the library's own stores take one line of
// store_table.cpp instead), chosen by its own VPMM_ALLOC_* bit.
//  - pause and resume move every byte through it, over several chunks, with
//    open/close around each transfer; the backup goes back at the resume
//    (not retained) and at free (retained);
//  - the C API accepts its flag, refuses it with another store's, and
//    vpmm_pool_backup_lookup names it when it has no host address;
//  - the registry refuses a bit that is taken or is no store's to take.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/registry.hpp"
#include "check.hpp"
#include "common/status.hpp"
#include "core/pause/stores/store_table.hpp"
#include "core/pool.hpp"

namespace {

using vpmm::Backup;
using vpmm::BackupDir;
using vpmm::BackupStore;
using vpmm::Pool;
using vpmm::PoolOptions;

constexpr uint64_t kPage = 64 << 10;
constexpr uint32_t kVectorStore = 1u << 12;  // a VPMM_ALLOC_* bit no store of the library uses

struct Calls {
  int acquire = 0, release = 0, open = 0, close = 0, write = 0, read = 0;
  std::map<const Backup*, std::vector<char>> bytes;  // what each live backup holds
};
Calls& calls() {
  static Calls c;
  return c;
}

class VectorStore final : public BackupStore {
 public:
  const char* name() const override { return "vector"; }
  vpmm_status acquire(const BackupDir&, uint64_t bytes, Backup* b) override {
    ++calls().acquire;
    calls().bytes[b].assign(bytes, 0);
    b->capacity = bytes;
    return VPMM_OK;
  }
  void release(Backup* b) override {
    ++calls().release;
    calls().bytes.erase(b);
  }
  bool staged() const override { return true; }
  vpmm_status open(Backup&) override {
    ++calls().open;
    return VPMM_OK;
  }
  vpmm_status write(Backup& b, const void* src, uint64_t off, uint64_t len) override {
    ++calls().write;
    std::memcpy(calls().bytes[&b].data() + off, src, len);
    return VPMM_OK;
  }
  vpmm_status read(Backup& b, void* dst, uint64_t off, uint64_t len) override {
    ++calls().read;
    std::memcpy(dst, calls().bytes[&b].data() + off, len);
    return VPMM_OK;
  }
  void close(Backup&) override { ++calls().close; }
  bool addressable() const override { return false; }
  std::string where(const Backup&) const override { return "a vector of the test"; }
};

std::unique_ptr<BackupStore> make_vector_store(const vpmm::StoreContext&) {
  return std::unique_ptr<BackupStore>(new VectorStore);
}

bool registered() {
  static const bool ok = vpmm::register_backup_store({"vector", kVectorStore, false, make_vector_store});
  return ok;
}

std::unique_ptr<Pool> make_pool() {
  CHECK(registered());
  vpmm::BackendParams bp;
  bp.host_capacity = 64 * kPage;
  vpmm_status st = VPMM_OK;
  std::unique_ptr<vpmm::Backend> b = vpmm::make_backend(VPMM_BACKEND_HOST, bp, &st);
  PoolOptions o;
  o.page_size = kPage;
  o.va_size = 64 * kPage;
  o.small_size = 0;
  o.pause_batch_bytes = kPage;  // one page per staging chunk: several chunks per backup
  std::unique_ptr<Pool> pool;
  CHECK_OK(Pool::create(std::move(b), o, &pool));
  return pool;
}

void fill(void* p, uint64_t n, unsigned seed) {
  auto* c = static_cast<unsigned char*>(p);
  for (uint64_t i = 0; i < n; ++i) c[i] = static_cast<unsigned char>(i * 7 + seed);
}
bool intact(const void* p, uint64_t n, unsigned seed) {
  auto* c = static_cast<const unsigned char*>(p);
  for (uint64_t i = 0; i < n; ++i)
    if (c[i] != static_cast<unsigned char>(i * 7 + seed)) return false;
  return true;
}

TEST("a store of the test keeps the bytes across pause and resume, through the staging slots") {
  std::unique_ptr<Pool> p = make_pool();
  if (!p) return;
  calls() = Calls();
  const uint64_t size = 3 * kPage;
  void* a = nullptr;
  CHECK_OK(p->malloc("test", size, nullptr, "weights", VPMM_ALLOC_HOST_BACKUP | kVectorStore, nullptr, &a));
  if (!a) return;
  fill(a, size, 3);
  uint64_t n = 0;
  CHECK_OK(p->pause("weights", &n));
  CHECK_EQ(n, uint64_t(1));
  CHECK_EQ(calls().acquire, 1);
  CHECK_EQ(calls().write, 3);  // one chunk per page
  CHECK_EQ(calls().open, 1);
  CHECK_EQ(calls().close, 1);
  CHECK_EQ(calls().bytes.size(), size_t(1));
  if (!calls().bytes.empty()) CHECK(intact(calls().bytes.begin()->second.data(), size, 3));
  // No host address: backup_lookup names the store's own description.
  void* host = nullptr;
  CHECK_EQ(p->backup_lookup(a, &host, nullptr), VPMM_ERR_UNSUPPORTED);
  CHECK(std::strstr(vpmm_last_error(), "a vector of the test") != nullptr);
  CHECK_OK(p->resume("weights", &n));
  CHECK_EQ(calls().read, 3);
  CHECK_EQ(calls().open, 2);
  CHECK_EQ(calls().close, 2);
  CHECK(intact(a, size, 3));
  CHECK_EQ(calls().release, 1);  // not retained, not kept: given back at the resume
  CHECK(calls().bytes.empty());
  CHECK_OK(p->free(a, nullptr));
  CHECK_EQ(p->check(), std::string());
}

TEST("a retained backup of the test's store stays with the allocation until it is freed") {
  std::unique_ptr<Pool> p = make_pool();
  if (!p) return;
  calls() = Calls();
  void* a = nullptr;
  CHECK_OK(p->malloc("test", kPage, nullptr, "kv", VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_RETAIN_BACKUP | kVectorStore,
                     nullptr, &a));
  if (!a) return;
  fill(a, kPage, 9);
  CHECK_OK(p->pause("kv"));
  CHECK_OK(p->resume("kv"));
  CHECK_EQ(calls().release, 0);
  CHECK_EQ(calls().bytes.size(), size_t(1));
  vpmm_tag_stats t;
  CHECK_OK(p->tag_stats("kv", &t));
  CHECK_EQ(t.retained_bytes, kPage);
  CHECK_OK(p->free(a, nullptr));
  CHECK_EQ(calls().release, 1);
  CHECK(calls().bytes.empty());
}

TEST("the C API takes the test store's flag like a library store's, and refuses two stores") {
  CHECK(registered());
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = kPage;
  c.host_capacity = 64 * kPage;
  vpmm_pool* pool = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &pool));
  if (!pool) return;
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = "t";
  a.flags = VPMM_ALLOC_HOST_BACKUP | kVectorStore;
  void* p = nullptr;
  CHECK_OK(vpmm_pool_malloc_ex(pool, kPage, nullptr, &a, &p));
  fill(p, kPage, 1);
  CHECK_OK(vpmm_pool_pause(pool, "t"));
  CHECK_OK(vpmm_pool_resume(pool, "t"));
  CHECK(intact(p, kPage, 1));
  a.flags = VPMM_ALLOC_HOST_BACKUP | kVectorStore | VPMM_ALLOC_BACKUP_MMAP;
  void* q = nullptr;
  CHECK_EQ(vpmm_pool_malloc_ex(pool, kPage, nullptr, &a, &q), VPMM_ERR_INVALID_ARGUMENT);
  CHECK_OK(vpmm_pool_free(pool, p, nullptr));
  CHECK_OK(vpmm_pool_destroy(pool));
  CHECK_EQ(std::string(vpmm::backup_store_name(kVectorStore)), std::string("vector"));
  CHECK_EQ(std::string(vpmm::backup_store_name(0)), std::string("pinned"));
}

TEST("the store registry refuses a taken bit, a bit that is no store's, and a taken name") {
  CHECK(registered());
  CHECK(!vpmm::register_backup_store({"vector", 1u << 13, false, make_vector_store}));
  CHECK(!vpmm::register_backup_store({"other", kVectorStore, false, make_vector_store}));
  CHECK(!vpmm::register_backup_store({"other", VPMM_ALLOC_BACKUP_DISK, false, make_vector_store}));
  CHECK(!vpmm::register_backup_store({"other", VPMM_ALLOC_HOST_BACKUP, false, make_vector_store}));
  CHECK(!vpmm::register_backup_store({"other", 0, false, make_vector_store}));
  CHECK(!vpmm::register_backup_store({"other", 3u << 10, false, make_vector_store}));  // two bits
  CHECK(!vpmm::register_backup_store({"other", 1u << 20, false, make_vector_store}));  // a directory bit
}

}  // namespace

int main(int argc, char** argv) { return vt::run_all(argc, argv); }
