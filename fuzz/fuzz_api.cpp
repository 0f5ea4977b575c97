// fuzz_api: every exported function with hostile arguments.
//
// Values passed are only those the contract allows: pools that are NULL,
// live or destroyed (a destroyed pool's shell stays readable by design), never
// a garbage vpmm_pool* (undefined behaviour); data pointers (free, lookup)
// that are anything at all: the pool looks them up, it never dereferences
// them; streams that are NULL, live, destroyed or garbage (the host backend
// checks them against its registry); reservations that are live, released
// or garbage (checked against the pool's set); struct_size values anywhere
// within a buffer that really is that large; strings of any bytes.
//
// Streams are also retired and destroyed in the middle of everything (held,
// with work queued, with memory freed on them or still live); a stale stream
// or reservation handle must be refused by every call that takes one (never
// act on an object made since), and no new handle may take a stale one's
// value; backup pauses (the pool's own copy stream) keep working.
// Configurations of every older size (case 29) get no byte written past
// them. A disk
// backup's directory is attacked between its pause and resume (case 28:
// disk_under_attack says what and what must hold).
//
// For every call: the status is one the function documents, an error leaves
// a message and the out-parameters untouched (a failed vpmm_pool_create's
// *out NULL, as vpmm.h says), and both pools still pass
// vpmm_pool_check with their allocation counts unchanged by a failed call.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "vpmm.h"
#include "vpmm_host_streams.h"

namespace {

constexpr size_t kBuf = 70000;  // > the largest struct_size any call accepts (65536)
alignas(16) unsigned char g_buf[kBuf];
constexpr uint64_t kSentinel = 0x5a5a5a5a5a5a5a5aull;

struct Pools {
  vpmm_pool* p[3] = {};  // two live pools and a destroyed one
  std::vector<void*> ptrs[2];
  std::vector<vpmm_reservation*> res[2];
  std::vector<vpmm_reservation*> released;
  std::vector<vpmm_stream> streams;       // live host streams
  std::vector<vpmm_stream> dead_streams;  // destroyed values
  int scopes = 0;
};

void noop_kernel(void*) {}
int oom_no(vpmm_pool*, uint64_t, void*) { return 0; }
void pressure_fn(vpmm_pool*, int, uint64_t, void*) {}
int visit_count(const vpmm_region_info*, void* u) { return ++*static_cast<int*>(u) > 1000; }

vpmm_pool* pick_pool(fz::Reader& in, Pools& w, int* idx) {
  int k = in.u8() % 4;
  *idx = k < 3 ? k : -1;
  return k < 3 ? w.p[k] : nullptr;
}

void* pick_ptr(fz::Reader& in, Pools& w) {
  switch (in.u8() % 7) {
    case 0: return nullptr;
    case 1:
    case 2: {
      auto& v = w.ptrs[in.u8() % 2];
      if (v.empty()) return nullptr;
      return v[in.u16() % v.size()];
    }
    case 3: {  // interior or one-past
      auto& v = w.ptrs[in.u8() % 2];
      if (v.empty()) return nullptr;
      return static_cast<char*>(v[in.u16() % v.size()]) + in.size_like() % (1u << 22);
    }
    case 4: return g_buf + in.u16() % 64;  // memory the pool never saw
    default: return reinterpret_cast<void*>(static_cast<uintptr_t>(in.u64()));  // garbage value
  }
}

vpmm_stream pick_stream(fz::Reader& in, Pools& w) {
  switch (in.u8() % 5) {
    case 0: return nullptr;
    case 1:
      if (!w.streams.empty()) return w.streams[in.u8() % w.streams.size()];
      return nullptr;
    case 2:
      if (!w.dead_streams.empty()) return w.dead_streams[in.u8() % w.dead_streams.size()];
      return nullptr;
    case 3: return reinterpret_cast<vpmm_stream>(g_buf + 128);
    default: return reinterpret_cast<vpmm_stream>(static_cast<uintptr_t>(in.u64()));
  }
}

vpmm_reservation* pick_res(fz::Reader& in, Pools& w, int pool_idx) {
  switch (in.u8() % 4) {
    case 0: return nullptr;
    case 1:
      if (pool_idx >= 0 && pool_idx < 2 && !w.res[pool_idx].empty())
        return w.res[pool_idx][in.u8() % w.res[pool_idx].size()];
      return nullptr;
    case 2:
      if (!w.released.empty()) return w.released[in.u8() % w.released.size()];
      return nullptr;
    default: return reinterpret_cast<vpmm_reservation*>(static_cast<uintptr_t>(in.u64()));
  }
}

// A destroyed stream or released reservation that no live object has taken
// over: every call must refuse it.
bool stale_stream(const Pools& w, vpmm_stream s) {
  if (s == nullptr) return false;
  for (vpmm_stream k : w.streams)
    if (k == s) return false;
  for (vpmm_stream k : w.dead_streams)
    if (k == s) return true;
  return false;
}
bool stale_res(const Pools& w, const vpmm_reservation* r) {
  if (r == nullptr) return false;
  for (const auto& v : w.res)
    for (const vpmm_reservation* k : v)
      if (k == r) return false;
  for (const vpmm_reservation* k : w.released)
    if (k == r) return true;
  return false;
}
// A new handle must not have the value of a stale one: calls through the
// stale handle would act on the new object.
void check_fresh_stream(const Pools& w, vpmm_stream s) {
  for (vpmm_stream k : w.dead_streams) FZ_CHECK(k != s, "new stream %p has the value of a destroyed one", s);
}
void check_fresh_res(const Pools& w, const vpmm_reservation* r) {
  for (const vpmm_reservation* k : w.released)
    FZ_CHECK(k != r, "new reservation %p has the value of a released one", static_cast<const void*>(r));
}

// A NUL-terminated string of any bytes, or NULL.
const char* pick_tag(fz::Reader& in, std::string* storage) {
  uint8_t k = in.u8() % 6;
  if (k == 0) return nullptr;
  if (k == 1) return "a";
  if (k == 2) return "";
  *storage = in.str(90);
  return storage->c_str();
}

bool one_of(vpmm_status st, std::initializer_list<vpmm_status> ok) {
  for (vpmm_status s : ok)
    if (st == s) return true;
  return false;
}

struct Counts {
  uint64_t n_live, requested, n_malloc, n_free, n_pause, n_resume;
};
Counts counts(vpmm_pool* p) {
  vpmm_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  FZ_CHECK(vpmm_pool_stats(p, &s) == VPMM_OK, "stats");
  return {s.n_live, s.requested_bytes, s.n_malloc, s.n_free, s.n_pause, s.n_resume};
}
bool same(const Counts& a, const Counts& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// A disk-backed allocation in a directory named one of four ways (absolute,
// relative after a chdir, missing, a plain file), paused, attacked between
// the pause and the resume as whoever may write the directory would attack
// it (the backup file swapped for a symbolic link to a victim or a file of
// its own, removed, moved; the directory renamed; the process's working
// directory changed), resumed, freed. The malloc fails with
// INVALID_ARGUMENT exactly for the missing and plain-file directories; the
// resume restores the allocation's own bytes; the victim keeps its bytes;
// nothing of the pool's keeps bytes once freed. Everything the attack
// changed is put back, the working directory included.
vpmm_status disk_under_attack(fz::Reader& in, vpmm_pool* p) {
  static const std::string base = [] {
    char t[] = "/tmp/vpmm-fuzz-dir-XXXXXX";
    std::string b = mkdtemp(t) ? t : "/tmp";
    mkdir((b + "/d").c_str(), 0700);
    FILE* f = std::fopen((b + "/victim").c_str(), "w");
    if (f) {
      std::fputs("victim", f);
      std::fclose(f);
    }
    return b;
  }();
  auto victim_ok = [] {
    char buf[16] = {};
    FILE* f = std::fopen((base + "/victim").c_str(), "r");
    if (!f) return false;
    const size_t n = std::fread(buf, 1, sizeof buf, f);
    std::fclose(f);
    return n == 6 && std::memcmp(buf, "victim", 6) == 0;
  };
  char cwd[4096];
  FZ_CHECK(getcwd(cwd, sizeof cwd) != nullptr, "getcwd");
  const int how = in.u8() % 4;
  std::string dir = how == 1 ? "d" : base + (how == 0 ? "/d" : how == 2 ? "/missing" : "/victim");
  if (how == 1) FZ_CHECK(chdir(base.c_str()) == 0, "chdir");
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.tag = "dk";
  a.flags = VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_DISK;
  a.backup_dir = dir.c_str();
  void* q = reinterpret_cast<void*>(kSentinel);
  const uint64_t bytes = 64 + in.u16() % (96 << 10);
  vpmm_status st = vpmm_pool_malloc_ex(p, bytes, nullptr, &a, &q);
  if (how >= 2) {
    FZ_CHECK(st == VPMM_ERR_INVALID_ARGUMENT && q == reinterpret_cast<void*>(kSentinel),
             "disk malloc in a directory that is not one -> %d", st);
    FZ_CHECK(chdir(cwd) == 0, "chdir back");
    return st;
  }
  if (st != VPMM_OK) {  // out of memory: the pool is small
    FZ_CHECK(chdir(cwd) == 0, "chdir back");
    return st;
  }
  std::memset(q, 0x6b, 64);
  st = vpmm_pool_pause(p, "dk");
  FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY, "disk pause -> %d", st);
  const std::string d = base + "/d";
  std::string file;
  if (DIR* dd = opendir(d.c_str())) {
    while (dirent* e = readdir(dd))
      if (std::strncmp(e->d_name, "vpmm-backup-", 12) == 0) file = d + "/" + e->d_name;
    closedir(dd);
  }
  const int attack = in.u8() % 6;
  bool renamed = false;
  if (!file.empty()) {
    switch (attack) {
      case 0:
        rename(file.c_str(), (d + "/moved").c_str());
        FZ_CHECK(symlink((base + "/victim").c_str(), file.c_str()) == 0, "symlink");
        break;
      case 1:
        rename(file.c_str(), (d + "/moved").c_str());
        if (FILE* f = std::fopen(file.c_str(), "w")) {
          std::fputs("ZZZZZZZZ", f);
          std::fclose(f);
        }
        break;
      case 2: unlink(file.c_str()); break;
      case 3: renamed = rename(d.c_str(), (base + "/d2").c_str()) == 0; break;
      default: FZ_CHECK(chdir("/") == 0, "chdir"); break;
    }
  }
  FZ_CHECK(vpmm_pool_resume(p, "dk") == VPMM_OK, "resume after attack %d", attack);
  for (int i = 0; i < 64; ++i)
    FZ_CHECK(static_cast<unsigned char*>(q)[i] == 0x6b, "byte %d of a disk backup changed (attack %d)", i, attack);
  if (in.u8() & 1) {  // a second pause writes into the pool's own file, wherever it is
    st = vpmm_pool_pause(p, "dk");
    FZ_CHECK(st == VPMM_OK || st == VPMM_ERR_OUT_OF_MEMORY, "second disk pause -> %d", st);
    FZ_CHECK(vpmm_pool_resume(p, "dk") == VPMM_OK, "second resume");
    FZ_CHECK(static_cast<unsigned char*>(q)[0] == 0x6b, "second resume lost the bytes");
  }
  FZ_CHECK(vpmm_pool_free(p, q, nullptr) == VPMM_OK, "free");
  FZ_CHECK(victim_ok(), "the victim file changed (attack %d)", attack);
  // Put everything back: no file of the pool's keeps bytes.
  if (renamed) FZ_CHECK(rename((base + "/d2").c_str(), d.c_str()) == 0, "rename back");
  FZ_CHECK(chdir(cwd) == 0, "chdir back");
  if (DIR* dd = opendir(d.c_str())) {
    std::vector<std::string> left;
    while (dirent* e = readdir(dd))
      if (e->d_name[0] != '.') left.push_back(d + "/" + e->d_name);
    closedir(dd);
    for (const std::string& f : left) {
      struct stat sb;
      const bool pools = lstat(f.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) && f == d + "/moved";
      FZ_CHECK(!pools || sb.st_size == 0, "the pool's moved file kept %lld bytes", (long long)sb.st_size);
      unlink(f.c_str());
    }
  }
  return VPMM_OK;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz::Reader in(data, size);
  Pools w;
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = 16 << 10;
  c.va_size = 64 * c.page_size;
  c.host_capacity = 4 << 20;
  for (int i = 0; i < 3; ++i) FZ_CHECK(vpmm_pool_create(&c, &w.p[i]) == VPMM_OK, "create");
  FZ_CHECK(vpmm_pool_destroy(w.p[2]) == VPMM_OK, "destroy");
  for (int i = 0; i < 2; ++i) {
    vpmm_stream s = nullptr;
    FZ_CHECK(vpmm_host_stream_create(&s) == VPMM_OK, "stream");
    w.streams.push_back(s);
  }

  const vpmm_status A = VPMM_ERR_INVALID_ARGUMENT;
  int ops = 0;
  while (!in.empty() && ops++ < 200) {
    const uint8_t fn = in.u8();
    int pi = -1;
    vpmm_pool* pool = pick_pool(in, w, &pi);
    const bool live = pi == 0 || pi == 1;
    Counts before[2] = {counts(w.p[0]), counts(w.p[1])};
    vpmm_status st = VPMM_OK;
    std::string s1;
    std::memset(g_buf, 0, 4096);
    switch (fn % 32) {
      case 0: {  // malloc
        uint64_t sz = in.size_like() % ((in.u8() & 1) ? (8u << 20) : UINT64_MAX);
        void* out = reinterpret_cast<void*>(kSentinel);
        void** outp = (in.u8() % 8) ? &out : nullptr;
        vpmm_stream ms = pick_stream(in, w);
        st = vpmm_pool_malloc(pool, sz, ms, outp);
        FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_OUT_OF_MEMORY}), "malloc -> %d", st);
        FZ_CHECK(!(st == VPMM_OK && stale_stream(w, ms)), "malloc on destroyed stream %p succeeded", ms);
        if (st == VPMM_OK) w.ptrs[pi].push_back(out);
        else FZ_CHECK(out == reinterpret_cast<void*>(kSentinel), "malloc wrote *out on error");
        break;
      }
      case 1: {  // malloc_ex with attrs of any size
        vpmm_alloc_attrs* a = reinterpret_cast<vpmm_alloc_attrs*>(g_buf);
        a->struct_size = (in.u8() & 1) ? sizeof *a : in.u16() % 4200;
        a->flags = (in.u8() & 1) ? VPMM_ALLOC_HOST_BACKUP : in.u32();
        a->tag = pick_tag(in, &s1);
        a->reservation = pick_res(in, w, pi);
        uint64_t sz = in.size_like() % (1u << 20);
        void* out = reinterpret_cast<void*>(kSentinel);
        vpmm_stream ms = pick_stream(in, w);
        const bool with_attrs = in.u8() % 8;
        st = vpmm_pool_malloc_ex(pool, sz, ms, with_attrs ? a : nullptr, &out);
        FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_OUT_OF_MEMORY}), "malloc_ex -> %d", st);
        FZ_CHECK(!(st == VPMM_OK && stale_stream(w, ms)), "malloc_ex on destroyed stream %p succeeded", ms);
        FZ_CHECK(!(st == VPMM_OK && with_attrs && a->struct_size >= sizeof *a && stale_res(w, a->reservation)),
                 "malloc_ex charged to released reservation %p succeeded", static_cast<void*>(a->reservation));
        if (st == VPMM_OK) w.ptrs[pi].push_back(out);
        else FZ_CHECK(out == reinterpret_cast<void*>(kSentinel), "malloc_ex wrote *out on error");
        break;
      }
      case 2:
      case 3: {  // free: anything at all
        void* p = pick_ptr(in, w);
        vpmm_stream fs = pick_stream(in, w);
        st = vpmm_pool_free(pool, p, fs);
        FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_UNKNOWN_POINTER, VPMM_ERR_BACKEND}), "free -> %d", st);
        FZ_CHECK(!(st == VPMM_OK && p && stale_stream(w, fs)), "free on destroyed stream %p succeeded", fs);
        if (st == VPMM_OK && p && live) {
          auto& v = w.ptrs[pi];
          bool found = false;
          for (size_t i = 0; i < v.size(); ++i)
            if (v[i] == p) {
              v.erase(v.begin() + static_cast<long>(i));
              found = true;
              break;
            }
          FZ_CHECK(found, "free of %p succeeded on a pool that never returned it", p);
        }
        break;
      }
      case 4: {  // lookup
        void* base = reinterpret_cast<void*>(kSentinel);
        uint64_t sz = kSentinel;
        uint8_t m = in.u8();
        st = vpmm_pool_lookup(pool, pick_ptr(in, w), (m & 1) ? &base : nullptr, (m & 2) ? &sz : nullptr);
        FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_UNKNOWN_POINTER}), "lookup -> %d", st);
        if (st != VPMM_OK)
          FZ_CHECK(base == reinterpret_cast<void*>(kSentinel) && sz == kSentinel, "lookup wrote outs on error");
        break;
      }
      case 5: {  // stats with any struct_size within the buffer
        vpmm_stats* s = reinterpret_cast<vpmm_stats*>(g_buf);
        uint32_t ss = (in.u8() & 1) ? sizeof(vpmm_stats) : in.u32() % 70000;
        std::memset(g_buf, 0xab, kBuf);
        s->struct_size = ss;
        st = vpmm_pool_stats(pool, (in.u8() % 8) ? s : nullptr);
        FZ_CHECK(one_of(st, {VPMM_OK, A}), "stats -> %d", st);
        if (st == VPMM_OK) {
          FZ_CHECK(s->struct_size == ss, "stats changed struct_size");
          for (size_t i = ss < 8 ? 8 : ss; i < kBuf; ++i)
            FZ_CHECK(g_buf[i] == 0xab, "stats wrote byte %zu beyond struct_size %u", i, ss);
        }
        break;
      }
      case 6: {  // dump with any capacity and any element size (the stride)
        uint32_t ss = (in.u8() & 1) ? sizeof(vpmm_region_info) : in.u32() % 70000;
        size_t cap = in.u16() % 300;
        if (ss > 0 && cap * ss > kBuf) cap = kBuf / ss;  // the buffer really holds cap elements
        size_t count = kSentinel;
        bool nullbuf = (in.u8() % 8) == 0;
        std::memset(g_buf, 0xab, kBuf);
        reinterpret_cast<vpmm_region_info*>(g_buf)->struct_size = ss;
        st = vpmm_pool_dump(pool, nullbuf ? nullptr : reinterpret_cast<vpmm_region_info*>(g_buf), cap,
                            (in.u8() % 8) ? &count : nullptr);
        FZ_CHECK(one_of(st, {VPMM_OK, A}), "dump -> %d", st);
        if (st == VPMM_OK && cap > 0 && count != kSentinel) {
          // Each element gets at most the library's struct; the rest of the
          // caller's element and everything past the last one stay as they were.
          size_t width = ss < sizeof(vpmm_region_info) ? ss : sizeof(vpmm_region_info);
          size_t filled = count < cap ? count : cap;
          for (size_t i = 0; i < cap; ++i)
            for (size_t b = i < filled ? width : i == 0 ? sizeof(uint32_t) : 0; b < ss; ++b)
              FZ_CHECK(g_buf[i * ss + b] == 0xab, "dump wrote byte %zu of element %zu (stride %u)", b, i, ss);
        }
        break;
      }
      case 7: {  // dump_text
        size_t cap = in.u16() % 8192;
        size_t needed = kSentinel;
        bool nullbuf = (in.u8() % 8) == 0;
        std::memset(g_buf, 0xcd, 8200);
        st = vpmm_pool_dump_text(pool, nullbuf ? nullptr : reinterpret_cast<char*>(g_buf), cap,
                                 (in.u8() % 2) ? &needed : nullptr);
        FZ_CHECK(one_of(st, {VPMM_OK, A}), "dump_text -> %d", st);
        if (st == VPMM_OK && !nullbuf && cap > 0) {
          FZ_CHECK(std::memchr(g_buf, 0, cap) != nullptr, "dump_text left no NUL within capacity");
          FZ_CHECK(g_buf[cap] == 0xcd, "dump_text wrote past capacity");
        }
        break;
      }
      case 8: {  // get_config
        vpmm_config* cfg = reinterpret_cast<vpmm_config*>(g_buf);
        uint32_t ss = (in.u8() & 1) ? sizeof(vpmm_config) : in.u32() % 70000;
        std::memset(g_buf, 0xab, kBuf);
        cfg->struct_size = ss;
        st = vpmm_pool_get_config(pool, (in.u8() % 8) ? cfg : nullptr);
        FZ_CHECK(one_of(st, {VPMM_OK, A}), "get_config -> %d", st);
        if (st == VPMM_OK)
          for (size_t i = ss < 4 ? 4 : ss; i < kBuf; ++i)
            FZ_CHECK(g_buf[i] == 0xab, "get_config wrote byte %zu beyond struct_size %u", i, ss);
        break;
      }
      case 9: {  // tag_stats
        vpmm_tag_stats* t = reinterpret_cast<vpmm_tag_stats*>(g_buf);
        t->struct_size = (in.u8() & 1) ? sizeof *t : in.u32() % 4200;
        st = vpmm_pool_tag_stats(pool, pick_tag(in, &s1), (in.u8() % 8) ? t : nullptr);
        FZ_CHECK(one_of(st, {VPMM_OK, A}), "tag_stats -> %d", st);
        break;
      }
      case 10: {  // pause / resume with any tag (no stream is ever held here)
        const char* tag = pick_tag(in, &s1);
        uint64_t n = kSentinel;
        uint64_t* np = (in.u8() & 1) ? &n : nullptr;  // n_changed may be NULL
        st = (in.u8() & 1) ? vpmm_pool_pause_ex(pool, tag, np) : vpmm_pool_resume_ex(pool, tag, np);
        FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_OUT_OF_MEMORY}), "pause/resume -> %d", st);
        if (np) FZ_CHECK((st == VPMM_OK) == (n != kSentinel), "n_changed written iff OK (status %d)", st);
        break;
      }
      case 11:
        st = vpmm_pool_trim(pool, in.size_like());
        FZ_CHECK(one_of(st, {VPMM_OK, A}), "trim -> %d", st);
        break;
      case 12: {  // reserve
        vpmm_reservation* r = reinterpret_cast<vpmm_reservation*>(kSentinel);
        uint32_t flags = (in.u8() & 1) ? in.u8() % 4 : in.u32();
        if (flags & VPMM_RESERVE_BLOCK) flags &= ~VPMM_RESERVE_BLOCK;  // BLOCK without a timeout may wait forever
        st = vpmm_pool_reserve_ex(pool, in.size_like(), flags | ((in.u8() & 1) ? VPMM_RESERVE_BLOCK : 0),
                                  in.u32() % 1000, (in.u8() % 8) ? &r : nullptr);
        FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_OUT_OF_MEMORY, VPMM_ERR_TIMEOUT}), "reserve -> %d", st);
        if (st == VPMM_OK) {
          check_fresh_res(w, r);
          w.res[pi].push_back(r);
        } else {
          FZ_CHECK(r == reinterpret_cast<vpmm_reservation*>(kSentinel), "reserve wrote *out on error");
        }
        break;
      }
      case 13: {  // reservation info / release with any reservation value
        vpmm_reservation* r = pick_res(in, w, pi);
        const bool stale = stale_res(w, r);
        if (in.u8() & 1) {
          uint64_t a = kSentinel, b = kSentinel;
          st = vpmm_reservation_info(pool, r, &a, &b);
          FZ_CHECK(one_of(st, {VPMM_OK, A}), "reservation_info -> %d", st);
          FZ_CHECK(!(st == VPMM_OK && stale), "info of released reservation %p succeeded", static_cast<void*>(r));
        } else {
          st = vpmm_reservation_release(pool, r);
          FZ_CHECK(one_of(st, {VPMM_OK, A}), "reservation_release -> %d", st);
          FZ_CHECK(!(st == VPMM_OK && stale), "release of released reservation %p succeeded", static_cast<void*>(r));
          if (st == VPMM_OK) {
            for (auto& v : w.res)
              for (size_t i = 0; i < v.size(); ++i)
                if (v[i] == r) v.erase(v.begin() + static_cast<long>(i--));
            w.released.push_back(r);
          }
        }
        break;
      }
      case 14:
        st = vpmm_pool_set_limit(pool, in.size_like());
        FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_WRONG_STATE}), "set_limit -> %d", st);
        break;
      case 15:
        st = (in.u8() & 1) ? vpmm_pool_set_oom_callback(pool, (in.u8() & 1) ? oom_no : nullptr, nullptr)
                           : vpmm_pool_set_pressure_callback(pool, (in.u8() & 1) ? pressure_fn : nullptr,
                                                             nullptr);
        FZ_CHECK(one_of(st, {VPMM_OK, A}), "set callback -> %d", st);
        break;
      case 16:
        st = vpmm_pool_check(pool);
        FZ_CHECK(live ? st == VPMM_OK : st == A, "check -> %d", st);
        break;
      case 17: {
        int n = 0;
        st = vpmm_pool_visit(pool, (in.u8() % 8) ? visit_count : nullptr, &n);
        FZ_CHECK(one_of(st, {VPMM_OK, A}), "visit -> %d", st);
        break;
      }
      case 18: {
        vpmm_stream ss = pick_stream(in, w);
        st = vpmm_pool_stream_synchronize(pool, ss);
        FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_BACKEND, VPMM_ERR_WRONG_STATE}), "pool sync -> %d", st);
        FZ_CHECK(!(st == VPMM_OK && stale_stream(w, ss)), "synchronize of destroyed stream %p succeeded", ss);
        break;
      }
      case 19:
        st = vpmm_pool_stream_retire(pool, pick_stream(in, w));
        FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_BACKEND}), "retire -> %d", st);
        break;
      case 20: {  // pool stream create / destroy
        if (in.u8() & 1) {
          vpmm_stream s = reinterpret_cast<vpmm_stream>(kSentinel);
          st = vpmm_pool_stream_create(pool, (in.u8() % 8) ? &s : nullptr);
          FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_UNSUPPORTED, VPMM_ERR_BACKEND}), "stream_create -> %d", st);
          if (st == VPMM_OK) {
            check_fresh_stream(w, s);
            w.streams.push_back(s);
          }
        } else {
          bool from_list = !w.streams.empty() && (in.u8() & 1);
          size_t i = from_list ? in.u8() % w.streams.size() : 0;
          vpmm_stream s = from_list ? w.streams[i] : pick_stream(in, w);
          const bool stale = stale_stream(w, s);
          st = vpmm_pool_stream_destroy(pool, s);
          FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_BACKEND}), "stream_destroy -> %d", st);
          FZ_CHECK(!(st == VPMM_OK && stale), "destroy of destroyed stream %p succeeded", s);
          if (st == VPMM_OK) {
            for (size_t k = 0; k < w.streams.size(); ++k)
              if (w.streams[k] == s) w.streams.erase(w.streams.begin() + static_cast<long>(k--));
            w.dead_streams.push_back(s);
          }
        }
        break;
      }
      case 21: {  // host streams with any value
        vpmm_stream s = pick_stream(in, w);
        switch (in.u8() % 5) {
          case 0: {
            // hold, then everything that must not block on a held stream
            st = vpmm_host_stream_hold(s);
            FZ_CHECK(one_of(st, {VPMM_OK, A}), "hold -> %d", st);
            if (st == VPMM_OK) {
              FZ_CHECK(vpmm_host_stream_synchronize(s) == VPMM_ERR_WRONG_STATE, "sync of a held stream");
              FZ_CHECK(vpmm_host_stream_release(s) == VPMM_OK, "release");
            }
            break;
          }
          case 1:
            st = vpmm_host_stream_release(s);
            FZ_CHECK(one_of(st, {A, VPMM_ERR_WRONG_STATE}), "release of a stream not held -> %d", st);
            break;
          case 2:
            st = vpmm_host_stream_launch(s, (in.u8() % 8) ? noop_kernel : nullptr, nullptr);
            FZ_CHECK(one_of(st, {VPMM_OK, A}), "launch -> %d", st);
            break;
          case 3:
            st = vpmm_host_stream_synchronize(s);
            FZ_CHECK(one_of(st, {VPMM_OK, A}), "host sync -> %d", st);
            break;
          default: {
            bool known = false;
            for (vpmm_stream k : w.streams) known |= k == s;
            if (known) break;  // live streams are destroyed through the list only
            st = vpmm_host_stream_destroy(s);
            FZ_CHECK(st == A, "destroy of NULL or an unknown stream -> %d", st);
          }
        }
        FZ_CHECK(!(st == VPMM_OK && stale_stream(w, s)), "host stream call on destroyed stream %p succeeded", s);
        break;
      }
      case 22: {  // scopes
        if (in.u8() & 1) {
          st = vpmm_region_push(pick_tag(in, &s1), (in.u8() & 1) ? VPMM_ALLOC_HOST_BACKUP : in.u32());
          FZ_CHECK(one_of(st, {VPMM_OK, A}), "push -> %d", st);
          if (st == VPMM_OK) ++w.scopes;
        } else {
          st = vpmm_region_pop();
          FZ_CHECK(st == (w.scopes ? VPMM_OK : VPMM_ERR_WRONG_STATE), "pop -> %d", st);
          if (st == VPMM_OK) --w.scopes;
        }
        break;
      }
      case 23: {
        const char* s = vpmm_status_string(static_cast<vpmm_status>(in.u32()));
        FZ_CHECK(s && *s, "status string");
        FZ_CHECK(vpmm_last_error() != nullptr, "last_error");
        FZ_CHECK(vpmm_version() && vpmm_abi_version() == VPMM_ABI_VERSION, "version");
        const char* bn = vpmm_pool_backend_name(pool);
        FZ_CHECK(live ? bn != nullptr : bn == nullptr, "backend_name");
        // The option table and struct facts: any index, any struct_size; a
        // failure leaves the buffer past struct_size untouched.
        {
          vpmm_option_info* oi = reinterpret_cast<vpmm_option_info*>(g_buf);
          std::memset(g_buf, 0x5a, sizeof(vpmm_option_info) + 16);
          oi->struct_size = (in.u8() & 1) ? sizeof *oi : in.u32() % 96;
          const uint32_t idx = (in.u8() & 1) ? in.u32() % (vpmm_option_count() + 2) : in.u32();
          st = vpmm_option_get(idx, (in.u8() % 8) ? oi : nullptr);
          FZ_CHECK(one_of(st, {VPMM_OK, A}), "option_get -> %d", st);
          if (st == VPMM_OK) FZ_CHECK(oi->name && oi->help && oi->default_text, "option strings");
          static const char* const kStructs[] = {"vpmm_config", "vpmm_stats", "vpmm_region", "", "vpmm_nope"};
          uint32_t size = 0, n = 0;
          st = vpmm_struct_layout((in.u8() % 8) ? kStructs[in.u8() % 5] : nullptr, &size, &n);
          FZ_CHECK(one_of(st, {VPMM_OK, A}), "struct_layout -> %d", st);
        }
        break;
      }
      case 24: {  // pool create with a config of any struct_size
        vpmm_config* cfg = reinterpret_cast<vpmm_config*>(g_buf);
        vpmm_config_init(cfg);
        cfg->backend = VPMM_BACKEND_HOST;
        cfg->host_capacity = 1 << 20;
        cfg->page_size = 16 << 10;
        cfg->va_size = cfg->page_size * 16;
        if (in.u8() & 1) cfg->struct_size = in.u32() % 70000;
        vpmm_pool* np = reinterpret_cast<vpmm_pool*>(kSentinel);
        const vpmm_config* arg = (in.u8() % 8) ? cfg : nullptr;
        const bool with_out = (in.u8() % 8) != 0;
        st = vpmm_pool_create(arg, with_out ? &np : nullptr);
        FZ_CHECK(one_of(st, {VPMM_OK, A, VPMM_ERR_UNSUPPORTED, VPMM_ERR_OUT_OF_MEMORY, VPMM_ERR_BACKEND}),
                 "create -> %d", st);
        if (st == VPMM_OK) FZ_CHECK(vpmm_pool_destroy(np) == VPMM_OK, "destroy");
        else if (with_out) FZ_CHECK(np == nullptr, "a failed create left *out set (vpmm.h: NULL)");
        break;
      }
      case 25:  // destroy of NULL or of the destroyed pool
        st = vpmm_pool_destroy((in.u8() & 1) ? nullptr : w.p[2]);
        FZ_CHECK(one_of(st, {VPMM_OK, A}), "destroy -> %d", st);
        break;
      case 26: {  // retire and destroy a live stream in the middle: held, with work and memory on it
        if (w.streams.empty()) {
          st = VPMM_OK;
          break;
        }
        size_t i = in.u8() % w.streams.size();
        vpmm_stream s = w.streams[i];
        uint8_t how = in.u8();
        void* q[2] = {nullptr, nullptr};
        for (int k = 0; k < 2; ++k)
          if (how & (1 << k)) {
            FZ_CHECK(vpmm_pool_malloc(w.p[k], 1 + in.u16() % (64 << 10), s, &q[k]) != VPMM_ERR_INVALID_ARGUMENT,
                     "malloc on a live stream");
            // Freed on the stream (pending there) or kept live past its end.
            if (q[k] && (how & 4)) {
              FZ_CHECK(vpmm_pool_free(w.p[k], q[k], s) == VPMM_OK, "free on a live stream");
              q[k] = nullptr;
            }
          }
        if (how & 8) FZ_CHECK(vpmm_host_stream_hold(s) == VPMM_OK, "hold");
        FZ_CHECK(vpmm_host_stream_launch(s, noop_kernel, nullptr) == VPMM_OK, "launch");
        for (int k = 0; k < 2; ++k) FZ_CHECK(vpmm_pool_stream_retire(w.p[k], s) == VPMM_OK, "retire");
        // Destroy drains, held or not.
        FZ_CHECK(vpmm_host_stream_destroy(s) == VPMM_OK, "destroy of a retired stream");
        w.streams.erase(w.streams.begin() + static_cast<long>(i));
        w.dead_streams.push_back(s);
        for (int k = 0; k < 2; ++k)
          if (q[k]) {
            w.ptrs[k].push_back(q[k]);
            FZ_CHECK(vpmm_pool_free(w.p[k], q[k], s) == A, "free on the destroyed stream");
          }
        FZ_CHECK(vpmm_host_stream_synchronize(s) == A, "synchronize of the destroyed stream");
        vpmm_stream n = nullptr;
        FZ_CHECK(vpmm_host_stream_create(&n) == VPMM_OK, "stream create");
        check_fresh_stream(w, n);
        w.streams.push_back(n);
        st = VPMM_OK;
        break;
      }
      case 27: {  // pause and resume with host backups (the pool's own copy stream) after it all
        int k = in.u8() % 2;
        vpmm_alloc_attrs a;
        std::memset(&a, 0, sizeof a);
        a.struct_size = sizeof a;
        a.tag = "bk";
        a.flags = VPMM_ALLOC_HOST_BACKUP;
        void* q = nullptr;
        if (vpmm_pool_malloc_ex(w.p[k], 1 + in.u16() % (128 << 10), nullptr, &a, &q) == VPMM_OK) {
          std::memset(q, 0x3c, 64);
          FZ_CHECK(vpmm_pool_pause(w.p[k], "bk") == VPMM_OK, "backup pause");
          FZ_CHECK(vpmm_pool_resume(w.p[k], "bk") == VPMM_OK, "backup resume");
          FZ_CHECK(static_cast<unsigned char*>(q)[63] == 0x3c, "backup lost its bytes");
          FZ_CHECK(vpmm_pool_free(w.p[k], q, nullptr) == VPMM_OK, "free");
        }
        st = VPMM_OK;
        break;
      }
      case 29: {  // a configuration of any size: nothing written past it
        const uint32_t n = (in.u8() & 1) ? 112 + 8 * (in.u8() % 9) : in.u32() % 70000;
        std::memset(g_buf, 0xab, sizeof(vpmm_config) + 64);
        const int which = in.u8() % 3;
        uint32_t wrote = 0;
        if (which == 2) {
          st = vpmm_config_init_sized(reinterpret_cast<vpmm_config*>(g_buf), n, in.u8() & 1);
          FZ_CHECK(one_of(st, {VPMM_OK, A}), "config_init_sized -> %d", st);
          FZ_CHECK((st == VPMM_OK) == (n >= 48 && n <= 65536), "config_init_sized(%u) -> %d", n, st);
          wrote = st == VPMM_OK ? (n < sizeof(vpmm_config) ? n : sizeof(vpmm_config)) : 0;
        } else {
          reinterpret_cast<vpmm_config*>(g_buf)->struct_size = n;
          (which ? vpmm_config_init : vpmm_config_init_defaults)(reinterpret_cast<vpmm_config*>(g_buf));
          // The sizes vpmm_config had before (config.hpp, kConfigOlderSizes):
          // 112 to 160 in steps of 8, then 176 (it grew by 16 bytes), then
          // it grew by 8 to 184 (the ledger): a random 168 is no older size.
          const bool older = (n >= 112 && n <= 160 && n % 8 == 0) || n == 176;
          wrote = older ? n : sizeof(vpmm_config);
          st = VPMM_OK;
        }
        if (wrote) FZ_CHECK(reinterpret_cast<vpmm_config*>(g_buf)->struct_size == wrote, "config struct_size");
        for (size_t i = wrote; i < sizeof(vpmm_config) + 64; ++i)
          FZ_CHECK(g_buf[i] == 0xab, "config init wrote byte %zu past %u", i, wrote);
        break;
      }
      case 28: {  // a disk backup while its directory is under attack
        st = disk_under_attack(in, w.p[in.u8() % 2]);
        break;
      }
      default: {  // free a pool allocation correctly (keeps the pools from filling up)
        int k = in.u8() % 2;
        if (!w.ptrs[k].empty()) {
          size_t i = in.u16() % w.ptrs[k].size();
          FZ_CHECK(vpmm_pool_free(w.p[k], w.ptrs[k][i], nullptr) == VPMM_OK, "free");
          w.ptrs[k].erase(w.ptrs[k].begin() + static_cast<long>(i));
        }
        st = VPMM_OK;
        break;
      }
    }
    if (st != VPMM_OK)
      FZ_CHECK(vpmm_last_error()[0] != '\0', "status %d without a message (fn %u)", st, fn % 32);
    for (int k = 0; k < 2; ++k) {
      FZ_CHECK(vpmm_pool_check(w.p[k]) == VPMM_OK, "pool %d invariants (fn %u)", k, fn % 32);
      if (st != VPMM_OK)
        FZ_CHECK(same(before[k], counts(w.p[k])), "failed call (fn %u, status %d) changed pool %d", fn % 32,
                 st, k);
    }
  }

  while (w.scopes-- > 0) vpmm_region_pop();
  for (int k = 0; k < 2; ++k) {
    for (void* p : w.ptrs[k]) FZ_CHECK(vpmm_pool_free(w.p[k], p, nullptr) == VPMM_OK, "free");
    for (vpmm_reservation* r : w.res[k]) FZ_CHECK(vpmm_reservation_release(w.p[k], r) == VPMM_OK, "release");
    FZ_CHECK(vpmm_pool_check(w.p[k]) == VPMM_OK, "check");
  }
  for (vpmm_stream s : w.streams) FZ_CHECK(vpmm_host_stream_destroy(s) == VPMM_OK, "stream destroy");
  for (int k = 0; k < 2; ++k) FZ_CHECK(vpmm_pool_destroy(w.p[k]) == VPMM_OK, "destroy");
  return 0;
}
