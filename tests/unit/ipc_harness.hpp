// Two processes for the sharing tests (test_ipc.cpp): the test process and a
// child it starts with fork + exec of its own binary, which serves commands
// over a Unix socket pair. The child is a real second process: its own pool,
// its own address space and file table, so an import there is what an
// importer in another program gets. On the host backend every physical
// handle is a memfd named "vpmm-handle" and every status page one named
// "vpmm-export", so /proc/PID/fd and /proc/PID/maps show exactly what each
// process still holds of them: the leak checks count those.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "patterns.hpp"
#include "pool_inspect.hpp"
#include "vpmm.h"

namespace vt {

constexpr uint64_t kIpcPage = 64 << 10;

inline vpmm_pool* ipc_host_pool(bool exportable, int device = 0, uint64_t large_rounding = 0) {
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.device = device;
  c.page_size = kIpcPage;
  c.va_size = 512 * kIpcPage;
  c.host_capacity = 64ull << 20;
  c.exportable = exportable ? 1 : 0;
  c.large_rounding = large_rounding;
  vpmm_pool* p = nullptr;
  return vpmm_pool_create(&c, &p) == VPMM_OK ? p : nullptr;
}

// A tagged allocation with a host backup (pausable, exportable whole).
inline void* malloc_tagged(vpmm_pool* p, uint64_t size, const char* tag) {
  vpmm_alloc_attrs a = sized<vpmm_alloc_attrs>();
  a.tag = tag;
  a.flags = VPMM_ALLOC_HOST_BACKUP;
  void* out = nullptr;
  return vpmm_pool_malloc_ex(p, size, nullptr, &a, &out) == VPMM_OK ? out : nullptr;
}

inline vpmm_ipc_entry entry_of(const vpmm_import* imp, size_t i = 0) {
  vpmm_ipc_entry e = sized<vpmm_ipc_entry>();
  vpmm_import_entry(imp, i, &e);
  return e;
}

inline int32_t export_state(const vpmm_export* ex, uint32_t* importers = nullptr) {
  int32_t s = 0;
  uint32_t n = 0;
  vpmm_export_state(ex, &s, &n, nullptr);
  if (importers) *importers = n;
  return s;
}

// The export's descriptor and its file descriptors (the export's: never close them).
inline vpmm_status descriptor_of(const vpmm_export* ex, std::string* d, std::vector<int>* fds) {
  size_t size = 0, n = 0;
  vpmm_status st = vpmm_export_descriptor(ex, nullptr, 0, &size, nullptr, 0, &n);
  if (st != VPMM_OK) return st;
  d->assign(size, '\0');
  fds->assign(n, -1);
  return vpmm_export_descriptor(ex, &(*d)[0], size, &size, fds->data(), n, &n);
}

// Receives a descriptor and its file descriptors from the socket.
inline vpmm_status recv_descriptor(int sock, std::string* desc, std::vector<int>* fds) {
  size_t size = 0, n = 0;
  vpmm_status st = vpmm_ipc_recv(sock, nullptr, 0, &size, nullptr, 0, &n);
  if (st != VPMM_OK) return st;
  desc->assign(size, '\0');
  fds->assign(n, -1);
  return vpmm_ipc_recv(sock, &(*desc)[0], size, &size, fds->empty() ? nullptr : fds->data(), n, &n);
}

// File descriptors and mappings of process `pid` on memfds named exactly
// `name` ("vpmm-handle", "vpmm-export"): /proc shows a memfd as
// "/memfd:NAME (deleted)". Only that is counted, never a file whose path
// merely contains the name (the test binary or the library in a build
// directory under libvpmm-1.0/, say).
struct Held {
  int fds = 0;
  int maps = 0;
  bool none() const { return fds == 0 && maps == 0; }
};

// Whether `text` names the memfd `name`: "/memfd:NAME" then the end, a space
// (" (deleted)") or a newline (a maps line).
inline bool names_memfd(const char* text, const char* name) {
  const std::string needle = std::string("/memfd:") + name;
  for (const char* p = std::strstr(text, needle.c_str()); p; p = std::strstr(p + 1, needle.c_str())) {
    const char end = p[needle.size()];
    if (end == '\0' || end == ' ' || end == '\n') return true;
  }
  return false;
}

// The memfds libvpmm makes on the host backend: pool memory, exportable
// handles, export status pages (host_backend.cpp, host_ipc.cpp, status_page.cpp).
constexpr const char* kLibvpmmMemfds[] = {"vpmm-host", "vpmm-handle", "vpmm-export"};

inline Held held(pid_t pid, const char* name);
// Everything of libvpmm's that process `pid` holds.
inline Held held_libvpmm(pid_t pid) {
  Held sum;
  for (const char* n : kLibvpmmMemfds) {
    Held h = held(pid, n);
    sum.fds += h.fds;
    sum.maps += h.maps;
  }
  return sum;
}

inline Held held(pid_t pid, const char* name) {
  Held h;
  char dir[64];
  std::snprintf(dir, sizeof dir, "/proc/%d/fd", static_cast<int>(pid));
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) {
      char path[384], target[256];
      std::snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      ssize_t n = readlink(path, target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (names_memfd(target, name)) ++h.fds;
    }
    closedir(d);
  }
  char maps[64];
  std::snprintf(maps, sizeof maps, "/proc/%d/maps", static_cast<int>(pid));
  if (FILE* f = std::fopen(maps, "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f))
      if (names_memfd(line, name)) ++h.maps;
    std::fclose(f);
  }
  return h;
}

// --- the command wire: an opcode and two numbers, answered by two numbers.
struct Cmd {
  char op;
  int64_t a, b;
};

inline bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

struct Child {
  pid_t pid = -1;
  int sock = -1;
  bool alive() const { return pid > 0; }

  // Sends a command and waits for its two answers; false when the child is gone.
  bool ask(char op, int64_t a = 0, int64_t b = 0, int64_t* r0 = nullptr, int64_t* r1 = nullptr) {
    return send(op, a, b) && answer(r0, r1);
  }
  bool send(char op, int64_t a = 0, int64_t b = 0) {
    Cmd c{op, a, b};
    return write_all(sock, &c, sizeof c);
  }
  bool answer(int64_t* r0 = nullptr, int64_t* r1 = nullptr) {
    int64_t r[2] = {0, 0};
    if (!read_all(sock, r, sizeof r)) return false;
    if (r0) *r0 = r[0];
    if (r1) *r1 = r[1];
    return true;
  }
  // A command the child answers by exiting; returns its exit status.
  int kill_and_wait(char op) {
    Cmd c{op, 0, 0};
    write_all(sock, &c, sizeof c);
    int status = 0;
    waitpid(pid, &status, 0);
    close(sock);
    pid = -1;
    sock = -1;
    return status;
  }
  // Orderly end: the child destroys its pool and exits 0.
  int quit() { return alive() ? kill_and_wait('Q') : 0; }
};

// fork + exec of this test binary as "MODE FD" ("--child" by default).
inline Child spawn_child(const char* mode = "--child") {
  int sv[2];
  Child c;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return c;
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    int flags = fcntl(sv[1], F_GETFD);
    fcntl(sv[1], F_SETFD, flags & ~FD_CLOEXEC);
    char fd[16];
    std::snprintf(fd, sizeof fd, "%d", sv[1]);
    execl("/proc/self/exe", "test_ipc", mode, fd, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(sv[1]);
  c.pid = pid;
  c.sock = sv[0];
  return c;
}

}  // namespace vt
