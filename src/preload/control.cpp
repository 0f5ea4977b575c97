// The interposer's control channel: pause and resume the pools of an
// unmodified program from outside it.
//
//   VPMM_PRELOAD_CTL=/tmp/app.ctl LD_PRELOAD=libvpmm_preload.so ./app &
//   echo "pause kv" > /tmp/app.ctl; cat /tmp/app.ctl.reply      # "ok 3"
//   echo "resume kv" > /tmp/app.ctl; cat /tmp/app.ctl.reply     # "ok 3"
//
// With VPMM_PRELOAD_CTL set, the library creates two FIFOs (mode 0600) when it
// is loaded: PATH for commands and PATH.reply for answers, and starts one
// thread that reads commands, one per line:
//   pause [TAG]    pause TAG (every tagged allocation without TAG) in every
//                  pool the interposer allocated from
//   resume [TAG]   resume them
// Each command is answered with one line on PATH.reply: "ok N" (N regions
// changed, summed over the pools) or "error TEXT". The answer waits up to
// 10 s for a reader to open PATH.reply, then is dropped (stderr says so).
//
// Before pausing, each device is synchronised through the real runtime, so
// kernels already queued do not read memory as it goes. The program must not
// launch work on paused memory (it faults): pause it between phases it does
// not touch the GPU in, the way torch_memory_saver's users do.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "preload/preload.hpp"
#include "vpmm.h"

namespace {

// A function-local static: constructed on first use, whatever the order of
// this file's initialisers and the load-time constructor below.
std::string& ctl_path() {
  static std::string path;
  return path;
}

bool make_fifo(const std::string& path) {
  if (mkfifo(path.c_str(), 0600) == 0 || errno == EEXIST) return true;
  std::fprintf(stderr, "libvpmm_preload: VPMM_PRELOAD_CTL: mkfifo %s: %s\n", path.c_str(),
               std::strerror(errno));
  return false;
}

// "ok N" or "error ...": pause/resume `tag` (empty: all tagged) everywhere.
std::string run(const std::string& verb, const std::string& tag) {
  const bool pause = verb == "pause";
  if (!pause && verb != "resume") return "error unknown command '" + verb + "' (pause|resume [TAG])";
  uint64_t total = 0;
  for (int d = 0; d < vpmm_preload::kMaxDevices; ++d) {
    vpmm_pool* pool = vpmm_preload::used_pool(d);
    if (!pool) continue;
    if (pause && !vpmm_preload::synchronize_device(d))
      std::fprintf(stderr, "libvpmm_preload: ctl: device %d not synchronised (no runtime?)\n", d);
    uint64_t n = 0;
    const char* t = tag.empty() ? nullptr : tag.c_str();
    vpmm_status st = pause ? vpmm_pool_pause_ex(pool, t, &n) : vpmm_pool_resume_ex(pool, t, &n);
    // A tag this device's pool never saw is not an error of the command:
    // other devices may hold it.
    if (st == VPMM_ERR_INVALID_ARGUMENT && t) continue;
    if (st != VPMM_OK)
      return std::string("error ") + vpmm_status_string(st) + ": " + vpmm_last_error();
    total += n;
  }
  return "ok " + std::to_string(total);
}

void reply(const std::string& line) {
  const std::string path = ctl_path() + ".reply";
  for (int i = 0; i < 1000; ++i) {  // 10 s for the controller to open the reply
    int fd = open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) {
      const std::string out = line + "\n";
      ssize_t w = write(fd, out.data(), out.size());
      (void)w;  // a controller that went away loses its answer
      close(fd);
      return;
    }
    if (errno != ENXIO) break;
    usleep(10000);
  }
  std::fprintf(stderr, "libvpmm_preload: ctl: nobody read the answer '%s'\n", line.c_str());
}

void* serve(void*) {
  std::string buf;
  for (;;) {
    int fd = open(ctl_path().c_str(), O_RDONLY);  // blocks until a controller writes
    if (fd < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "libvpmm_preload: ctl: open %s: %s (control stops)\n",
                   ctl_path().c_str(), std::strerror(errno));
      return nullptr;
    }
    char chunk[256];
    ssize_t got;
    while ((got = read(fd, chunk, sizeof chunk)) > 0 || (got < 0 && errno == EINTR)) {
      if (got <= 0) continue;
      buf.append(chunk, static_cast<size_t>(got));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        if (line.empty()) continue;
        const size_t sp = line.find(' ');
        reply(run(line.substr(0, sp), sp == std::string::npos ? "" : line.substr(sp + 1)));
      }
    }
    close(fd);
  }
}

// Started when the library is loaded, before the program's main: the
// channel exists as soon as the process does.
__attribute__((constructor)) void start_control() {
  const char* path = vpmm_preload::option_text("preload_ctl");
  if (!path || !*path) return;
  ctl_path() = path;
  if (!make_fifo(ctl_path()) || !make_fifo(ctl_path() + ".reply")) return;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, serve, nullptr) != 0)
    std::fprintf(stderr, "libvpmm_preload: ctl: no control thread\n");
  pthread_attr_destroy(&attr);
}

}  // namespace
