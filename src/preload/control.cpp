// The interposer's control channel: pause and resume the pools of an
// unmodified program from outside it.
//
//   VPMM_PRELOAD_CTL=$XDG_RUNTIME_DIR/app.ctl LD_PRELOAD=libvpmm_preload.so ./app &
//   echo "pause kv" > $XDG_RUNTIME_DIR/app.ctl; cat $XDG_RUNTIME_DIR/app.ctl.reply   # "ok 3"
//   echo "resume kv" > $XDG_RUNTIME_DIR/app.ctl; cat $XDG_RUNTIME_DIR/app.ctl.reply  # "ok 3"
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
// Whoever can write PATH drives the program's memory, and whatever PATH.reply
// names receives its answers: the channel is the user's only. Each path must
// be absent (it is made then) or a FIFO the effective user owns with no
// group or other permission bits (one an earlier run left), never a symbolic
// link (not followed: O_NOFOLLOW) or any other file; anything else refuses
// the channel, with a message on stderr, and no command is ever read. Every
// open checks again what it opened (fstat), so a path swapped after the
// check is refused too; the command FIFO is opened once, for good (with a
// writer of the thread's own, so no command is lost between two
// controllers). The path belongs in a directory only the user can write,
// the per-user runtime directory ($XDG_RUNTIME_DIR) rather than /tmp.
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

// Why the file behind `st` may not carry the channel, or nullptr if it may:
// a FIFO of the effective user, no group or other permission bits.
const char* unfit(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return "is a symbolic link";
  if (!S_ISFIFO(st.st_mode)) return S_ISREG(st.st_mode) ? "is a regular file, not a FIFO" : "is not a FIFO";
  if (st.st_uid != geteuid()) return "is a FIFO of another user";
  if (st.st_mode & 077) return "is a FIFO with group or other permissions (must be 0600)";
  return nullptr;
}

void refuse(const std::string& path, const char* why) {
  std::fprintf(stderr,
               "libvpmm_preload: VPMM_PRELOAD_CTL: %s %s: refusing the control channel (no command will be "
               "read; remove it, or use a path in a directory only you can write, such as $XDG_RUNTIME_DIR)\n",
               path.c_str(), why);
}

// Makes the FIFO at `path` fresh, or accepts one the user left there
// (lstat: a symbolic link is judged, not followed). *made: this call made it.
bool make_fifo(const std::string& path, bool* made) {
  *made = false;
  if (mkfifo(path.c_str(), 0600) == 0) {
    *made = true;
  } else if (errno != EEXIST) {
    std::fprintf(stderr, "libvpmm_preload: VPMM_PRELOAD_CTL: mkfifo %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "libvpmm_preload: VPMM_PRELOAD_CTL: %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  if (const char* why = unfit(st)) {
    refuse(path, why);
    return false;
  }
  return true;
}

// open(path, flags) of a channel FIFO, never through a symbolic link, and
// only if what was opened is still one fit to carry it; -1 otherwise (errno
// kept for open's own failures; *why set when the file is unfit).
int open_fifo(const std::string& path, int flags, const char** why) {
  *why = nullptr;
  int fd = open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) *why = "is a symbolic link";
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || (*why = unfit(st)) != nullptr) {
    if (!*why) *why = "cannot be examined (fstat failed)";
    close(fd);
    return -1;
  }
  return fd;
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
    const char* why = nullptr;
    int fd = open_fifo(path, O_WRONLY | O_NONBLOCK, &why);
    if (fd >= 0) {
      const std::string out = line + "\n";
      ssize_t w = write(fd, out.data(), out.size());
      (void)w;  // a controller that went away loses its answer
      close(fd);
      return;
    }
    if (why) {
      refuse(path, why);
      break;
    }
    if (errno != ENXIO) break;  // ENXIO: a FIFO with no reader yet
    usleep(10000);
  }
  std::fprintf(stderr, "libvpmm_preload: ctl: nobody read the answer '%s'\n", line.c_str());
}

// Opens the command FIFO for good: a reader, and a writer of the thread's
// own so that the FIFO never reads as ended between two controllers (when
// the last reader closes, what a controller just wrote is dropped: the next
// command would be lost) and is never opened again by its name. Both ends
// are checked, and must be the same FIFO. -1 when refused (said on stderr).
int open_commands() {
  const char* why = nullptr;
  int fd = -1;
  do {
    fd = open_fifo(ctl_path(), O_RDONLY | O_NONBLOCK, &why);
  } while (fd < 0 && !why && errno == EINTR);
  if (fd < 0) {
    if (why)
      refuse(ctl_path(), why);
    else
      std::fprintf(stderr, "libvpmm_preload: ctl: open %s: %s (control stops)\n", ctl_path().c_str(),
                   std::strerror(errno));
    return -1;
  }
  const int keep = open_fifo(ctl_path(), O_WRONLY | O_NONBLOCK, &why);
  struct stat r, w;
  if (keep < 0 || fstat(fd, &r) != 0 || fstat(keep, &w) != 0 || r.st_dev != w.st_dev || r.st_ino != w.st_ino) {
    refuse(ctl_path(), why ? why : "was replaced while it was opened");
    if (keep >= 0) close(keep);
    close(fd);
    return -1;
  }
  // The writer stays open for the process's life (never written: commands
  // come from controllers); reads block again.
  const int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    std::fprintf(stderr, "libvpmm_preload: ctl: %s: %s (control stops)\n", ctl_path().c_str(), std::strerror(errno));
    close(keep);
    close(fd);
    return -1;
  }
  return fd;
}

void* serve(void*) {
  const int fd = open_commands();
  if (fd < 0) return nullptr;
  std::string buf;
  char chunk[256];
  for (;;) {
    const ssize_t got = read(fd, chunk, sizeof chunk);  // blocks until a controller writes
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {  // cannot happen while the thread's own writer is open
      std::fprintf(stderr, "libvpmm_preload: ctl: reading %s: %s (control stops)\n", ctl_path().c_str(),
                   got < 0 ? std::strerror(errno) : "end of file");
      close(fd);
      return nullptr;
    }
    buf.append(chunk, static_cast<size_t>(got));
    if (buf.size() > 65536) buf.clear();  // no line that long is a command: drop it rather than grow
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
}

// Started when the library is loaded, before the program's main: the
// channel exists as soon as the process does.
__attribute__((constructor)) void start_control() {
  const char* path = vpmm_preload::option_text("preload_ctl");
  if (!path || !*path) return;
  ctl_path() = path;
  bool made = false, made_reply = false;
  if (!make_fifo(ctl_path(), &made)) return;
  if (!make_fifo(ctl_path() + ".reply", &made_reply)) {
    if (made) unlink(ctl_path().c_str());  // no channel: leave nothing of it behind
    return;
  }
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, serve, nullptr) != 0)
    std::fprintf(stderr, "libvpmm_preload: ctl: no control thread\n");
  pthread_attr_destroy(&attr);
}

}  // namespace
