// An exporter's liveness as its importers read it (vpmm_import_state), on
// the host backend: an exporter that exited reads EXITED, whatever an
// importer does with the status page it holds (docs/misuse.md, row I21).
// The test forks the exporter before any thread of the library's starts.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "pool_util.hpp"

namespace {

// Another process's pool, its export and the descriptor sent on `sock`;
// then it waits for one byte and exits without cleaning up, as a crash would.
[[noreturn]] void exporter_process(int sock) {
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = 64 << 10;
  c.va_size = 64ull << 20;
  c.host_capacity = 16ull << 20;
  c.exportable = 1;
  vpmm_pool* p = nullptr;
  void* x = nullptr;
  vpmm_export* ex = nullptr;
  vpmm_alloc_attrs a = vt::sized<vpmm_alloc_attrs>();
  a.tag = "w";
  a.flags = VPMM_ALLOC_HOST_BACKUP;
  if (vpmm_pool_create(&c, &p) != VPMM_OK || vpmm_pool_malloc_ex(p, 128 << 10, nullptr, &a, &x) != VPMM_OK ||
      vpmm_pool_export(p, x, &ex) != VPMM_OK || vpmm_export_send(ex, sock) != VPMM_OK)
    _exit(2);
  char go;
  _exit(read(sock, &go, 1) == 1 ? 0 : 3);
}

}  // namespace

TEST("an exporter that exited reads EXITED even when an importer holds the exporter's lock byte") {
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    exporter_process(sv[1]);
  }
  close(sv[1]);
  size_t size = 0, n = 0;
  CHECK_OK(vpmm_ipc_recv(sv[0], nullptr, 0, &size, nullptr, 0, &n));
  std::string desc(size, '\0');
  std::vector<int> fds(n, -1);
  CHECK_OK(vpmm_ipc_recv(sv[0], &desc[0], size, &size, fds.data(), n, &n));
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = 64 << 10;
  c.va_size = 64ull << 20;
  c.host_capacity = 16ull << 20;
  vpmm_pool* pool = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &pool));
  vpmm_import* imp = nullptr;
  vpmm_import* other = nullptr;  // a second importer of the same export, in another pool
  vpmm_pool* pool2 = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &pool2));
  CHECK_OK(vpmm_pool_import(pool, desc.data(), desc.size(), fds.data(), fds.size(), &imp));
  CHECK_OK(vpmm_pool_import(pool2, desc.data(), desc.size(), fds.data(), fds.size(), &other));
  int32_t s = -1;
  CHECK_OK(vpmm_import_state(imp, &s));
  CHECK_EQ(s, VPMM_EXPORT_ACTIVE);
  // The exporter exits; the importer kept the status page's memfd (fds[0]).
  CHECK_EQ(write(sv[0], "x", 1), 1);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_OK(vpmm_import_state(imp, &s));
  CHECK_EQ(s, VPMM_EXPORT_EXITED);
  // The old trick: a description of its own of the page, and the lock on
  // the exporter's byte the exporter's death released.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
  const int forged = open(path, O_RDWR | O_CLOEXEC);
  CHECK(forged >= 0);
  struct flock fl;
  std::memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  CHECK_EQ(fcntl(forged, F_OFD_SETLK, &fl), 0);
  for (vpmm_import* i : {imp, other}) {
    s = -1;
    CHECK_OK(vpmm_import_state(i, &s));
    CHECK_EQ(s, VPMM_EXPORT_EXITED);
  }
  // An importer that opens the page only now (the exporter already gone,
  // the lock already forged) is not deceived either.
  vpmm_pool* pool3 = nullptr;
  vpmm_import* late = nullptr;
  CHECK_OK(vpmm_pool_create(&c, &pool3));
  if (vpmm_pool_import(pool3, desc.data(), desc.size(), fds.data(), fds.size(), &late) == VPMM_OK) {
    s = -1;
    CHECK_OK(vpmm_import_state(late, &s));
    CHECK_EQ(s, VPMM_EXPORT_EXITED);
    CHECK_OK(vpmm_import_close(pool3, late));
  }
  close(forged);
  for (int fd : fds) close(fd);
  close(sv[0]);
  CHECK_OK(vpmm_import_close(pool, imp));
  CHECK_OK(vpmm_import_close(pool2, other));
  CHECK_OK(vpmm_pool_destroy(pool));
  CHECK_OK(vpmm_pool_destroy(pool2));
  CHECK_OK(vpmm_pool_destroy(pool3));
}

TEST_MAIN()
