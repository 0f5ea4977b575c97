// Observability (docs/misuse.md rows 25, 27, 48, 75, 76): dumps, texts and
// layouts refuse a NULL buffer with a capacity but take a short one (a
// prefix and the full size); every status has a name and unknown codes a
// fixed one; a visit callback may call the pool; and the views of one state
// agree (tag stats, lookups and backup lookups, struct names); the driver
// profile counts each kind of call, grows only, and writes no more than the
// caller's struct_size.
#include <cstring>
#include <string>
#include <vector>

#include "contract.hpp"

using namespace ct;

TEST("dump and dump_text reject a NULL buffer with a capacity; short buffers are fine") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &x));
  size_t n = 12345;
  EXPECT_ERR(p, vpmm_pool_dump(p, nullptr, 4, &n), IA, "vpmm_pool_dump");
  CHECK_EQ(n, size_t(12345));
  size_t need = 12345;
  EXPECT_ERR(p, vpmm_pool_dump_text(p, nullptr, 16, &need), IA, "vpmm_pool_dump_text");
  CHECK_EQ(need, size_t(12345));
  // Not errors: a buffer shorter than the dump gets a prefix and the total.
  std::vector<vpmm_region_info> all = vt::regions(p);
  CHECK(all.size() >= 2);
  vpmm_region_info one{};
  one.struct_size = sizeof one;
  CHECK_OK(vpmm_pool_dump(p, &one, 1, &n));
  CHECK_EQ(n, all.size());
  CHECK_EQ(one.va, all[0].va);
  char small[8];
  CHECK_OK(vpmm_pool_dump_text(p, small, sizeof small, &need));
  CHECK(need > sizeof small);
  CHECK_EQ(std::strlen(small), sizeof small - 1);
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("pool_layout: the one layout string, sized, truncated, checked") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 2 * kPage, nullptr, &x));
  size_t need = 12345;
  EXPECT_ERR(p, vpmm_pool_layout(p, nullptr, 16, &need), IA, "vpmm_pool_layout");
  CHECK_EQ(need, size_t(12345));
  CHECK_OK(vpmm_pool_layout(p, nullptr, 0, &need));
  std::string full(need, '\0');
  CHECK_OK(vpmm_pool_layout(p, &full[0], full.size(), nullptr));
  full.resize(std::strlen(full.c_str()));
  CHECK_EQ(full.size() + 1, need);
  CHECK_EQ(full.substr(0, 3), std::string("[2]"));  // the live allocation first
  CHECK_EQ(full, vt::layout(p));
  // The text dump prints the same notation for its regions.
  std::string text(4096, '\0');
  CHECK_OK(vpmm_pool_dump_text(p, &text[0], text.size(), nullptr));
  CHECK(text.find(full.substr(0, full.find(" | "))) != std::string::npos);
  // Truncation is not an error: a NUL-terminated prefix and the full size.
  char small[4];
  CHECK_OK(vpmm_pool_layout(p, small, sizeof small, &need));
  CHECK_EQ(need, full.size() + 1);
  CHECK_EQ(std::string(small), full.substr(0, 3));
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("status strings: every code has a name, unknown codes a fixed one") {
  CHECK_EQ(std::string(vpmm_status_string(VPMM_OK)), std::string("VPMM_OK"));
  CHECK_EQ(std::string(vpmm_status_string(VPMM_ERR_OUT_OF_MEMORY)), std::string("VPMM_ERR_OUT_OF_MEMORY"));
  CHECK_EQ(std::string(vpmm_status_string(VPMM_ERR_TIMEOUT)), std::string("VPMM_ERR_TIMEOUT"));
  // 100 was VPMM_NO_OP before ABI 1's clean-up: no success is non-zero now.
  for (vpmm_status s : {-1, 9, 99, 100, 101, INT32_MAX, INT32_MIN}) {
    const char* name = vpmm_status_string(s);
    CHECK(name != nullptr);
    if (name) CHECK_EQ(std::string(name), std::string("VPMM_ERR_UNKNOWN"));
  }
}

TEST("row 48: a pool call from inside a vpmm_pool_visit callback works (no deadlock)") {
  vpmm_pool* p = suite_pool().make();
  if (!p) return;
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, kPage, nullptr, &x));
  struct Ctx {
    vpmm_pool* p;
    int calls;
    vpmm_status st;
  } ctx{p, 0, VPMM_OK};
  EXPECT_STATUS(vpmm_pool_visit(
                    p,
                    [](const vpmm_region_info*, void* u) -> int {
                      Ctx* c = static_cast<Ctx*>(u);
                      void* y = nullptr;
                      vpmm_status st = vpmm_pool_malloc(c->p, 100, nullptr, &y);
                      if (st == VPMM_OK) st = vpmm_pool_free(c->p, y, nullptr);
                      if (st == VPMM_OK) st = vpmm_pool_check(c->p);
                      if (st != VPMM_OK) c->st = st;
                      ++c->calls;
                      return 0;
                    },
                    &ctx),
                VPMM_OK, "");
  CHECK(ctx.calls >= 2);
  CHECK_EQ(ctx.st, VPMM_OK);
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("views agree: tag stats, backup lookup, struct names") {
  vpmm_pool* p = host_pool(0, /*small_size=*/16 << 10);
  CHECK(p != nullptr);
  void* s = vt::malloc_tagged(p, 1000, "w", 0);
  CHECK(s != nullptr);
  CHECK_OK(vpmm_pool_free(p, s, nullptr));  // its slab stays cached, empty
  vpmm_tag_stats t = tag_stats(p, "w");
  CHECK_EQ(t.n_live, uint64_t(0));
  CHECK_EQ(t.live_bytes, uint64_t(0));
  uint64_t n = 1;
  CHECK_OK(vpmm_pool_pause_ex(p, "w", &n));
  CHECK_EQ(n, uint64_t(0));

  void* big = vt::malloc_tagged(p, kPage + 100, "b", VPMM_ALLOC_HOST_BACKUP);
  CHECK(big != nullptr);
  CHECK_OK(vpmm_pool_pause(p, "b"));
  char* padding = static_cast<char*>(big) + kPage + 200;
  void* host = nullptr;
  uint64_t bytes = 0;
  CHECK_EQ(vpmm_pool_lookup(p, padding, nullptr, nullptr), UP);
  CHECK_EQ(vpmm_pool_backup_lookup(p, padding, &host, &bytes), UP);
  CHECK_OK(vpmm_pool_backup_lookup(p, static_cast<char*>(big) + 10, &host, &bytes));
  CHECK_EQ(bytes, kPage + 90);
  CHECK_OK(vpmm_pool_free(p, big, nullptr));

  uint32_t size = 0, size_info = 0, fields = 0;
  CHECK_OK(vpmm_struct_layout("vpmm_region", &size, &fields));
  CHECK_OK(vpmm_struct_layout("vpmm_region_info", &size_info, nullptr));
  CHECK_EQ(size, size_info);
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("driver profile: calls by kind, growing only, at most struct_size bytes written") {
  vpmm_pool* p = make_pool();
  if (!p) return;
  vpmm_driver_profile before, after;
  before.struct_size = after.struct_size = sizeof before;
  CHECK_OK(vpmm_pool_driver_profile(p, &before));
  CHECK_EQ(before.struct_size, uint32_t(sizeof before));
  void* x = nullptr;
  CHECK_OK(vpmm_pool_malloc(p, 3 * kPage, nullptr, &x));  // grows: create, map, set access
  CHECK_OK(vpmm_pool_driver_profile(p, &after));
  CHECK(after.create_calls > before.create_calls && after.create_ns > before.create_ns);
  CHECK(after.map_calls > before.map_calls && after.map_ns > before.map_ns);
  CHECK(after.set_access_calls > before.set_access_calls);
  CHECK_OK(vpmm_pool_free(p, x, nullptr));
  CHECK_OK(vpmm_pool_trim(p, 0));  // unmaps and releases the freed pages
  vpmm_driver_profile end;
  end.struct_size = sizeof end;
  CHECK_OK(vpmm_pool_driver_profile(p, &end));
  CHECK(end.unmap_calls > after.unmap_calls && end.release_calls > after.release_calls);
  CHECK(end.map_calls >= after.map_calls && end.create_ns >= after.create_ns);
  // An older caller's struct: 16 bytes (struct_size, reserved0, create_calls) and not one more.
  unsigned char buf[sizeof(vpmm_driver_profile)];
  std::memset(buf, 0xAB, sizeof buf);
  uint32_t small = 16;
  std::memcpy(buf, &small, sizeof small);
  CHECK_OK(vpmm_pool_driver_profile(p, reinterpret_cast<vpmm_driver_profile*>(buf)));
  uint64_t created = 0;
  std::memcpy(&created, buf + 8, sizeof created);
  CHECK_EQ(created, end.create_calls);
  CHECK_EQ(buf[16], 0xAB);
  vpmm_driver_profile bad;
  bad.struct_size = 8;
  EXPECT_ERR_MSG(p, vpmm_pool_driver_profile(p, &bad), IA, "vpmm_pool_driver_profile", "struct_size");
  EXPECT_ERR(p, vpmm_pool_driver_profile(p, nullptr), IA, "vpmm_pool_driver_profile");
  CHECK_OK(vpmm_pool_destroy(p));
}
