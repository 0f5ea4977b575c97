// fuzz_ipc: exports and imports under a hostile importer, in one process on
// the host backend (docs/ipc.md, "What an importer cannot do").
//
// An exporting pool makes allocations (tagged, untagged, small blocks) and
// exports them (one, many, a tag); what an importer would receive (the
// descriptor's bytes and duplicates of its file descriptors: the same open
// files, as SCM_RIGHTS gives them) is then mutated byte by byte, its file
// descriptors truncated, grown, punched, written, mapped, sealed, locked,
// re-flagged, swapped, closed or replaced by other files, and imported into
// two other pools (with its descriptors, or by pidfd_getfd from this
// process), while the exporter frees, pauses, resumes, trims, closes, sends
// over a socket nobody reads, and touches every byte of its live memory.
//
// Checked after every operation: every call returns a status its header
// documents; the exporter's memory can be read and written (a SIGBUS ends
// the run); each export's state is the one the exporter's own operations
// imply (a model: ACTIVE until one of its allocations is freed, paused, or
// it is closed; a tag export with slabs may also end FREED when a slab
// goes), and every import of it reads that same state; the exporting pool
// passes vpmm_pool_check; nothing blocks (a send into a full socket
// returns). At the end of each input the process holds no more file
// descriptors than before it.
#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "vpmm.h"

namespace {

constexpr uint64_t kPage = 16 << 10;

struct Alloc {
  void* p;
  uint64_t size;
  bool tagged;
};

struct Exp {
  vpmm_export* ex;
  std::vector<void*> covers;  // allocations whose free or pause ends it
  bool tag = false;           // a tag export (may share slabs)
  int32_t model = VPMM_EXPORT_ACTIVE;
};

struct Received {  // what an importer holds: bytes and its own descriptors
  std::string desc;
  std::vector<int> fds;
  int from = -1;  // the export it came from (index into exports), for the state model
};

struct Imp {
  vpmm_import* imp;
  int pool;
  int from;
};

int count_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

bool one_of(vpmm_status st, std::initializer_list<vpmm_status> ok) {
  return std::find(ok.begin(), ok.end(), st) != ok.end();
}

vpmm_pool* make_pool(bool exportable) {
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = kPage;
  c.va_size = 256 * kPage;
  c.host_capacity = 8 << 20;
  c.exportable = exportable ? 1 : 0;
  vpmm_pool* p = nullptr;
  FZ_CHECK(vpmm_pool_create(&c, &p) == VPMM_OK, "create");
  return p;
}

struct World {
  vpmm_pool* ex = nullptr;
  vpmm_pool* im[2] = {};
  std::vector<Alloc> allocs;
  std::vector<Exp> exports;
  std::vector<Received> received;
  std::vector<Imp> imports;
  std::vector<int> kept;  // descriptions and sockets the attacks hold
  bool paused = false;    // tag "w" is paused

  int32_t state_of(int e) const { return e >= 0 && e < static_cast<int>(exports.size()) ? exports[e].model : -1; }

  // A pause, free or close: the model of every export it touches.
  void ended(void* p, int32_t state) {
    for (Exp& e : exports)
      if (e.model == VPMM_EXPORT_ACTIVE && std::find(e.covers.begin(), e.covers.end(), p) != e.covers.end())
        e.model = state;
  }

  void check_states() {
    for (size_t i = 0; i < exports.size(); ++i) {
      if (!exports[i].ex) continue;
      int32_t s = 0;
      FZ_CHECK(vpmm_export_state(exports[i].ex, &s, nullptr, nullptr) == VPMM_OK, "export_state");
      // A tag export shares its small-object slabs whole: it ends when a
      // slab's pages go (FREED), or when a pause takes a slab (PAUSED), which
      // the model does not follow; its large allocations it does.
      FZ_CHECK(s == exports[i].model || (exports[i].tag && exports[i].model == VPMM_EXPORT_ACTIVE &&
                                         (s == VPMM_EXPORT_FREED || s == VPMM_EXPORT_PAUSED)),
               "export %zu: state %d, the exporter's operations say %d", i, s, exports[i].model);
      if (exports[i].tag && s != exports[i].model) exports[i].model = s;
    }
    for (const Imp& m : imports) {
      int32_t s = 0;
      FZ_CHECK(vpmm_import_state(m.imp, &s) == VPMM_OK, "import_state");
      const int32_t want = state_of(m.from);
      FZ_CHECK(want < 0 || s == want, "an import reads %d, its export's state is %d", s, want);
    }
    FZ_CHECK(vpmm_pool_check(ex) == VPMM_OK, "the exporting pool fails its check");
  }

  // Every byte of the exporter's live memory, read and written.
  void touch() {
    for (const Alloc& a : allocs) {
      if (a.tagged && paused) continue;
      volatile unsigned char* b = static_cast<volatile unsigned char*>(a.p);
      unsigned sum = 0;
      for (uint64_t i = 0; i < a.size; i += 256) sum += b[i];
      std::memset(a.p, static_cast<int>(sum & 0xff), a.size);
    }
  }
};

void receive(World& w, int e) {
  if (w.received.size() >= 8 || !w.exports[e].ex) return;
  size_t size = 0, n = 0;
  vpmm_status st = vpmm_export_descriptor(w.exports[e].ex, nullptr, 0, &size, nullptr, 0, &n);
  FZ_CHECK(one_of(st, {VPMM_OK, VPMM_ERR_WRONG_STATE}), "export_descriptor -> %d", st);
  if (st != VPMM_OK) return;
  Received r;
  r.desc.assign(size, '\0');
  std::vector<int> fds(n);
  FZ_CHECK(vpmm_export_descriptor(w.exports[e].ex, &r.desc[0], size, &size, fds.data(), n, &n) == VPMM_OK,
           "export_descriptor");
  for (int fd : fds) r.fds.push_back(fcntl(fd, F_DUPFD_CLOEXEC, 0));
  r.from = e;
  w.received.push_back(std::move(r));
}

// Something a hostile importer does to what it received.
void attack(World& w, Received& r, fz::Reader& in) {
  const uint8_t k = in.u8();
  if (r.fds.empty()) return;
  int& fd = r.fds[in.u8() % r.fds.size()];
  struct stat st;
  const off_t size = fd >= 0 && fstat(fd, &st) == 0 ? st.st_size : 0;
  switch (k % 12) {
    case 0: (void)!ftruncate(fd, static_cast<off_t>(in.u16())); break;
    case 1: (void)!ftruncate(fd, size + static_cast<off_t>(in.u16()) + 1); break;
    case 2: (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, size); break;
    case 3: {  // write through a writable mapping, if the kernel allows one
      if (size <= 0) break;
      void* m = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) {
        std::memset(m, in.u8(), static_cast<size_t>(std::min<off_t>(size, 4096)));
        munmap(m, static_cast<size_t>(size));
      }
      break;
    }
    case 4: {
      uint64_t v = in.u64();
      (void)!pwrite(fd, &v, sizeof v, static_cast<off_t>(in.u8()) * 8);
      break;
    }
    case 5: (void)fcntl(fd, F_ADD_SEALS, static_cast<int>(in.u8() & 0x1f)); break;
    case 6: {  // locks through a description of its own, kept
      char path[64];
      std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
      int own = open(path, O_RDWR | O_CLOEXEC);
      if (own < 0) break;
      w.kept.push_back(own);
      const int n = in.u8() % 64;
      for (int i = 0; i < n; ++i) {
        struct flock fl;
        std::memset(&fl, 0, sizeof fl);
        fl.l_type = in.u8() & 1 ? F_WRLCK : F_RDLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = in.u16() % 4200;
        fl.l_len = in.u8() % 3;
        (void)fcntl(own, F_OFD_SETLK, &fl);
      }
      break;
    }
    case 7: (void)fcntl(fd, F_SETFL, O_NONBLOCK | O_APPEND); (void)lseek(fd, 0, SEEK_END); break;
    case 8: {  // another file in its place
      close(fd);
      switch (in.u8() % 4) {
        case 0: fd = memfd_create("vpmm-handle", MFD_CLOEXEC); (void)!ftruncate(fd, size); break;
        case 1: fd = open("/dev/null", O_RDWR | O_CLOEXEC); break;
        case 2: {
          int p[2];
          if (pipe2(p, O_CLOEXEC) == 0) {
            close(p[1]);
            fd = p[0];
          } else {
            fd = -1;
          }
          break;
        }
        default: fd = -1;
      }
      break;
    }
    case 9: std::swap(fd, r.fds[in.u8() % r.fds.size()]); break;
    case 10: {  // the bytes: a flipped byte, a changed word, cut, grown
      if (r.desc.empty()) break;
      const size_t at = in.u16() % r.desc.size();
      switch (in.u8() % 4) {
        case 0: r.desc[at] = static_cast<char>(r.desc[at] ^ (1 << (in.u8() % 8))); break;
        case 1: {
          uint32_t v = in.u32();
          if (at + 4 <= r.desc.size()) std::memcpy(&r.desc[at], &v, 4);
          break;
        }
        case 2: r.desc.resize(at); break;
        default: r.desc.append(in.u8() % 64, static_cast<char>(in.u8()));
      }
      break;
    }
    default: {  // a descriptor short, or one too many
      if (in.u8() & 1) {
        close(r.fds.back());
        r.fds.pop_back();
      } else {
        r.fds.push_back(fcntl(r.fds[0], F_DUPFD_CLOEXEC, 0));
      }
    }
  }
}

void do_import(World& w, Received& r, fz::Reader& in) {
  if (w.imports.size() >= 8) return;
  const int pi = in.u8() % 2;
  vpmm_import* imp = reinterpret_cast<vpmm_import*>(0x5e47);
  const bool by_pidfd = (in.u8() % 4) == 0;
  vpmm_status st = by_pidfd ? vpmm_pool_import(w.im[pi], r.desc.data(), r.desc.size(), nullptr, 0, &imp)
                            : vpmm_pool_import(w.im[pi], r.desc.data(), r.desc.size(), r.fds.data(),
                                               r.fds.size(), &imp);
  FZ_CHECK(one_of(st, {VPMM_OK, VPMM_ERR_INVALID_ARGUMENT, VPMM_ERR_WRONG_STATE, VPMM_ERR_UNSUPPORTED,
                       VPMM_ERR_OUT_OF_MEMORY, VPMM_ERR_BACKEND}),
           "import -> %d", st);
  if (st != VPMM_OK) {
    FZ_CHECK(imp == reinterpret_cast<vpmm_import*>(0x5e47), "a failed import wrote *out");
    return;
  }
  // Whatever was mangled, an import that succeeded is of a live export of
  // this process, and reads its state.
  w.imports.push_back({imp, pi, r.from});
  vpmm_ipc_entry e;
  std::memset(&e, 0, sizeof e);
  e.struct_size = sizeof e;
  FZ_CHECK(vpmm_import_entry(imp, 0, &e) == VPMM_OK && e.ptr, "import_entry");
  volatile unsigned char* b = static_cast<volatile unsigned char*>(e.ptr);
  unsigned sum = 0;
  for (uint64_t i = 0; i < e.size; i += 512) sum += b[i];  // the importer reads its entry
  (void)sum;
}

// The exporter sends an export into a socket nobody reads: it must return.
void send_unread(World& w, int e, fz::Reader& in) {
  if (!w.exports[e].ex) return;
  int sv[2];
  if (socketpair(AF_UNIX, (in.u8() & 1 ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
    return;
  vpmm_status st = VPMM_OK;
  for (int i = 0; i < 1 + in.u8() % 64 && st == VPMM_OK; ++i) st = vpmm_export_send(w.exports[e].ex, sv[0]);
  FZ_CHECK(one_of(st, {VPMM_OK, VPMM_ERR_WRONG_STATE, VPMM_ERR_BACKEND}), "export_send -> %d", st);
  close(sv[0]);
  close(sv[1]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz::Reader in(data, size);
  const int fds_before = count_fds();
  World w;
  w.ex = make_pool(true);
  w.im[0] = make_pool(false);
  w.im[1] = make_pool(false);
  int ops = 0;
  while (!in.empty() && ops++ < 120) {
    const uint8_t op = in.u8();
    switch (op % 14) {
      case 0:
      case 1: {  // allocate: tagged (pausable, whole pages), untagged, small
        if (w.allocs.size() >= 12) break;
        const uint8_t kind = in.u8() % 3;
        const uint64_t sz = kind == 2 ? 16 + in.u16() % 2000 : kPage / 2 + in.u16() % (4 * kPage);
        void* p = nullptr;
        vpmm_status st;
        if (kind == 0) {
          if (w.paused) break;
          vpmm_alloc_attrs a;
          std::memset(&a, 0, sizeof a);
          a.struct_size = sizeof a;
          a.tag = "w";
          a.flags = VPMM_ALLOC_HOST_BACKUP;
          st = vpmm_pool_malloc_ex(w.ex, sz, nullptr, &a, &p);
        } else {
          st = vpmm_pool_malloc(w.ex, sz, nullptr, &p);
        }
        FZ_CHECK(one_of(st, {VPMM_OK, VPMM_ERR_OUT_OF_MEMORY}), "malloc -> %d", st);
        if (st == VPMM_OK) w.allocs.push_back({p, sz, kind == 0});
        break;
      }
      case 2: {  // free
        if (w.allocs.empty()) break;
        const size_t i = in.u8() % w.allocs.size();
        FZ_CHECK(vpmm_pool_free(w.ex, w.allocs[i].p, nullptr) == VPMM_OK, "free");
        w.ended(w.allocs[i].p, VPMM_EXPORT_FREED);
        w.allocs.erase(w.allocs.begin() + static_cast<long>(i));
        break;
      }
      case 3: {  // export one, many, or the tag
        if (w.exports.size() >= 8 || w.allocs.empty()) break;
        Exp e;
        std::vector<const void*> ptrs;
        const uint8_t how = in.u8() % 3;
        const size_t n = how == 1 ? 1 + in.u8() % w.allocs.size() : 1;
        for (size_t k = 0; k < n; ++k) {
          const Alloc& a = w.allocs[in.u8() % w.allocs.size()];
          ptrs.push_back(static_cast<char*>(a.p) + in.u16() % a.size);  // interior pointers allowed
          e.covers.push_back(a.p);
        }
        vpmm_status st;
        if (how == 2) {
          e.tag = true;
          e.covers.clear();
          for (const Alloc& a : w.allocs)  // small blocks: their slab is shared, see check_states
            if (a.tagged && a.size > kPage / 2) e.covers.push_back(a.p);
          st = vpmm_pool_export_tag(w.ex, "w", &e.ex);
        } else if (how == 1) {
          st = vpmm_pool_export_many(w.ex, ptrs.data(), ptrs.size(), &e.ex);
        } else {
          st = vpmm_pool_export(w.ex, ptrs[0], &e.ex);
        }
        FZ_CHECK(one_of(st, {VPMM_OK, VPMM_ERR_WRONG_STATE, VPMM_ERR_INVALID_ARGUMENT}), "export -> %d", st);
        if (st == VPMM_OK) w.exports.push_back(e);
        break;
      }
      case 4:  // an importer receives an export
        if (!w.exports.empty()) receive(w, in.u8() % w.exports.size());
        break;
      case 5:
      case 6:
      case 7:  // ... and attacks what it received
        if (!w.received.empty()) attack(w, w.received[in.u8() % w.received.size()], in);
        break;
      case 8:  // ... imports it
        if (!w.received.empty()) do_import(w, w.received[in.u8() % w.received.size()], in);
        break;
      case 9: {  // ... closes an import
        if (w.imports.empty()) break;
        const size_t i = in.u8() % w.imports.size();
        FZ_CHECK(vpmm_import_close(w.im[w.imports[i].pool], w.imports[i].imp) == VPMM_OK, "import_close");
        w.imports.erase(w.imports.begin() + static_cast<long>(i));
        break;
      }
      case 10: {  // the exporter pauses or resumes its tag, or trims
        const uint8_t k = in.u8() % 3;
        if (k == 0 && !w.paused) {
          vpmm_status st = vpmm_pool_pause(w.ex, "w");
          FZ_CHECK(one_of(st, {VPMM_OK, VPMM_ERR_INVALID_ARGUMENT}), "pause -> %d", st);  // IA: tag never used
          if (st != VPMM_OK) break;
          w.paused = true;
          for (const Alloc& a : w.allocs)
            if (a.tagged) w.ended(a.p, VPMM_EXPORT_PAUSED);
        } else if (k == 1 && w.paused) {
          vpmm_status st = vpmm_pool_resume(w.ex, "w");
          FZ_CHECK(st == VPMM_OK, "resume -> %d", st);
          w.paused = false;
        } else {
          FZ_CHECK(vpmm_pool_trim(w.ex, in.u16() * kPage) == VPMM_OK, "trim");
        }
        break;
      }
      case 11: {  // the exporter closes an export
        if (w.exports.empty()) break;
        Exp& e = w.exports[in.u8() % w.exports.size()];
        if (!e.ex) break;
        FZ_CHECK(vpmm_export_close(w.ex, e.ex) == VPMM_OK, "export_close");
        e.ex = nullptr;
        if (e.model == VPMM_EXPORT_ACTIVE) e.model = VPMM_EXPORT_CLOSED;
        break;
      }
      case 12:  // the exporter sends into a socket nobody reads
        if (!w.exports.empty()) send_unread(w, in.u8() % w.exports.size(), in);
        break;
      default: {  // stats on both sides
        vpmm_ipc_stats s;
        std::memset(&s, 0, sizeof s);
        s.struct_size = sizeof s;
        FZ_CHECK(vpmm_pool_ipc_stats(w.ex, &s) == VPMM_OK, "ipc_stats");
        FZ_CHECK(vpmm_pool_ipc_stats(w.im[0], &s) == VPMM_OK, "ipc_stats");
      }
    }
    w.touch();
    w.check_states();
  }
  for (const Imp& m : w.imports) FZ_CHECK(vpmm_import_close(w.im[m.pool], m.imp) == VPMM_OK, "import_close");
  for (Exp& e : w.exports)
    if (e.ex) FZ_CHECK(vpmm_export_close(w.ex, e.ex) == VPMM_OK, "export_close");
  for (Received& r : w.received)
    for (int fd : r.fds)
      if (fd >= 0) close(fd);
  for (int fd : w.kept) close(fd);
  for (vpmm_pool* p : {w.ex, w.im[0], w.im[1]}) FZ_CHECK(vpmm_pool_destroy(p) == VPMM_OK, "destroy");
  const int fds_after = count_fds();
  FZ_CHECK(fds_after == fds_before, "%d file descriptors before the input, %d after", fds_before, fds_after);
  return 0;
}
