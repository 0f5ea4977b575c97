/* The preload control channel refuses paths it does not own (docs/preload.md,
 * "Pause and resume from outside the program"). Run without LD_PRELOAD as
 *   test_preload_ctl LIBVPMM_PRELOAD_SO WORK_DIR
 * it lays out one hostile path per case in a fresh directory under WORK_DIR,
 * runs itself as the program under LD_PRELOAD with VPMM_PRELOAD_CTL naming
 * it, and checks what the interposer did:
 *   - a symbolic link at PATH.reply (to a file the program may write),
 *   - a regular file at PATH (holding a command),
 *   - a FIFO at PATH with group and other permissions (0666),
 *   - a symbolic link at PATH (to a FIFO of the user's):
 * each is refused with a message on stderr that names the path, no command
 * runs (the program's tagged memory is never paused), and the file behind
 * the path is untouched. A FIFO the user left at both paths (mode 0600, an
 * earlier run's) still carries commands.
 * The program side (argv[1] == "child") allocates tagged memory through the
 * interposer, then acts as an outside controller would: it writes
 * "pause preload" to PATH if a reader appears there and watches its memory
 * for a pause. Before the fix every hostile case paused it (and the reply
 * overwrote the link's target). */
#define _GNU_SOURCE /* RTLD_DEFAULT, realpath */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vpmm.h"

int cudaMalloc(void** p, size_t n);
int cudaFree(void* p);

static int g_passed, g_failed;
#define CHECK(cond)                                                                    \
  do {                                                                                 \
    if (cond) g_passed++;                                                              \
    else { g_failed++; fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } \
  } while (0)

static const char kVictim[] = "the user's own file: nobody's answers belong here\n";
static const char kCommand[] = "pause preload\n";

/* ---- the program, under LD_PRELOAD ---- */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int child(void) {
  void* sym = dlsym(RTLD_DEFAULT, "vpmm_get_api");
  const vpmm_api* (*get_api)(uint32_t);
  const vpmm_api* api;
  vpmm_pool* pool = NULL;
  vpmm_tag_stats ts;
  const char* path = getenv("VPMM_PRELOAD_CTL");
  void* mem = NULL;
  int sent = 0, paused = 0;
  double until;
  if (!sym || !path) {
    fprintf(stderr, "child: not under LD_PRELOAD=libvpmm_preload.so with VPMM_PRELOAD_CTL\n");
    return 2;
  }
  memcpy(&get_api, &sym, sizeof get_api);
  api = get_api(1);
  if (!api || api->default_pool(0, &pool) != VPMM_OK || cudaMalloc(&mem, 1u << 20) != 0) {
    fprintf(stderr, "child: no pool memory\n");
    return 2;
  }
  /* A controller's command, if the channel listens (a bounded wait: the
   * control thread opens PATH soon after the load when it serves at all). */
  until = now_s() + 2.0;
  while (!paused && now_s() < until) {
    if (!sent) {
      int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOFOLLOW);
      if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode))
          sent = write(fd, kCommand, sizeof kCommand - 1) == (ssize_t)(sizeof kCommand - 1);
        close(fd);
      }
    }
    memset(&ts, 0, sizeof ts);
    ts.struct_size = sizeof ts;
    paused = api->pool_tag_stats(pool, "preload", &ts) == VPMM_OK && ts.paused_bytes > 0;
    if (!paused) usleep(10000);
  }
  if (paused) {
    /* The answer follows the command: give it time to land where PATH.reply
     * points (a symbolic link's target, before the fix). */
    const char* victim = getenv("VPMM_TEST_VICTIM");
    until = now_s() + 1.0;
    while (victim && now_s() < until) {
      FILE* f = fopen(victim, "r");
      char buf[sizeof kVictim];
      size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
      if (f) fclose(f);
      buf[got] = '\0';
      if (strcmp(buf, kVictim) != 0) break;
      usleep(10000);
    }
    printf("paused\n");
  } else {
    cudaFree(mem);
  }
  /* 0: nothing ran; 1: a command ran; 3: the channel took it (for the case
   * where it must). */
  return paused ? 1 : sent ? 3 : 0;
}

/* ---- the driver ---- */

static char g_so[4096], g_base[4200];

static void write_file(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static int file_is(const char* path, const char* text) {
  char buf[512];
  size_t n;
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strcmp(buf, text) == 0;
}

/* Runs the program with VPMM_PRELOAD_CTL=ctl, its stderr into err; returns
 * its exit status (-1: killed). */
static int run_child(const char* self, const char* ctl, const char* err, const char* victim) {
  pid_t pid = fork();
  int status = 0;
  if (pid == 0) {
    int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) dup2(fd, 2);
    setenv("LD_PRELOAD", g_so, 1);
    setenv("VPMM_BACKEND", "host", 1);
    setenv("VPMM_HOST_CAPACITY", "256M", 1);
    setenv("VPMM_PRELOAD_TAG", "preload", 1);
    setenv("VPMM_PRELOAD_HOST_BACKUP", "1", 1);
    setenv("VPMM_PRELOAD_CTL", ctl, 1);
    setenv("VPMM_TEST_VICTIM", victim, 1);
    execl(self, self, "child", (char*)NULL);
    _exit(127);
  }
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int stderr_says(const char* err, const char* what) {
  char buf[8192];
  size_t n;
  FILE* f = fopen(err, "r");
  if (!f) return 0;
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, what) != NULL && strstr(buf, "refusing the control channel") != NULL;
}

/* Removes `path` and, for a directory, what is in it (lstat: links are
 * removed, never followed). */
static void remove_tree(const char* path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR* d = opendir(path);
    struct dirent* e;
    while (d && (e = readdir(d)) != NULL) {
      char sub[4600];
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      remove_tree(sub);
    }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

/* A fresh directory for one case: ctl (PATH), reply (PATH.reply), victim,
 * err. */
struct Case {
  char dir[4300], ctl[4400], reply[4500], victim[4400], err[4400];
};

static void make_case(struct Case* c, const char* name) {
  snprintf(c->dir, sizeof c->dir, "%s/%s.XXXXXX", g_base, name);
  if (!mkdtemp(c->dir)) {
    perror("mkdtemp");
    exit(2);
  }
  snprintf(c->ctl, sizeof c->ctl, "%s/app.ctl", c->dir);
  snprintf(c->reply, sizeof c->reply, "%s/app.ctl.reply", c->dir);
  snprintf(c->victim, sizeof c->victim, "%s/victim", c->dir);
  snprintf(c->err, sizeof c->err, "%s/stderr", c->dir);
  write_file(c->victim, kVictim);
}

int main(int argc, char** argv) {
  char self[4096];
  ssize_t n;
  struct Case c;
  struct stat st;
  int rc;
  if (argc == 2 && strcmp(argv[1], "child") == 0) return child();
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIBVPMM_PRELOAD_SO WORK_DIR\n", argv[0]);
    return 2;
  }
  snprintf(g_so, sizeof g_so, "%s", argv[1]);
  n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 2;
  self[n] = '\0';
  if (!realpath(argv[2], self)) { /* links below name their targets by absolute path */
    perror(argv[2]);
    return 2;
  }
  snprintf(g_base, sizeof g_base, "%s/preload_ctl.XXXXXX", self);
  n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 2;
  self[n] = '\0';
  if (!mkdtemp(g_base)) {
    perror("mkdtemp");
    return 2;
  }
  umask(077);

  /* A symbolic link at PATH.reply: the answers would go over its target. */
  make_case(&c, "reply_symlink");
  CHECK(symlink(c.victim, c.reply) == 0);
  rc = run_child(self, c.ctl, c.err, c.victim);
  CHECK(rc == 0);
  CHECK(stderr_says(c.err, c.reply));
  CHECK(file_is(c.victim, kVictim));
  CHECK(lstat(c.ctl, &st) != 0); /* the FIFO it made for the refused channel is gone */

  /* A regular file at PATH holding a command (and one at PATH.reply): once
   * run in a loop, unasked. */
  make_case(&c, "regular_file");
  write_file(c.ctl, kCommand);
  write_file(c.reply, kVictim);
  rc = run_child(self, c.ctl, c.err, c.reply);
  CHECK(rc == 0);
  CHECK(stderr_says(c.err, c.ctl));
  CHECK(file_is(c.ctl, kCommand));
  CHECK(file_is(c.reply, kVictim));

  /* A FIFO at PATH that others may write (0666): anyone drives the program. */
  make_case(&c, "wide_fifo");
  CHECK(mkfifo(c.ctl, 0600) == 0 && chmod(c.ctl, 0666) == 0);
  rc = run_child(self, c.ctl, c.err, c.victim);
  CHECK(rc == 0);
  CHECK(stderr_says(c.err, c.ctl));
  CHECK(stat(c.ctl, &st) == 0 && S_ISFIFO(st.st_mode) && (st.st_mode & 0777) == 0666);

  /* A symbolic link at PATH, even to a FIFO of the user's: not followed. */
  make_case(&c, "ctl_symlink");
  {
    char fifo[4500];
    snprintf(fifo, sizeof fifo, "%s/elsewhere.fifo", c.dir);
    CHECK(mkfifo(fifo, 0600) == 0 && symlink(fifo, c.ctl) == 0);
    rc = run_child(self, c.ctl, c.err, c.victim);
    CHECK(rc == 0);
    CHECK(stderr_says(c.err, c.ctl));
    CHECK(file_is(c.victim, kVictim));
  }

  /* The user's own FIFOs, left by an earlier run (0600): the channel works. */
  make_case(&c, "own_fifos");
  CHECK(mkfifo(c.ctl, 0600) == 0 && mkfifo(c.reply, 0600) == 0);
  rc = run_child(self, c.ctl, c.err, c.victim);
  CHECK(rc == 1);

  remove_tree(g_base);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
