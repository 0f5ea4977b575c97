// The disk store's directory under attack, through the public API on the
// host backend (issue 35 items 6 and 7, issue 36 item 6): whoever can write
// the backup directory may rename, remove or replace what is in it between
// two calls of the pool, and the process may chdir. What must hold:
//  - a directory that does not exist, or is no directory, fails the malloc
//    that names it (INVALID_ARGUMENT, naming it), with nothing allocated;
//  - a relative directory names the directory of the first call that named
//    it; a chdir later changes nothing (pause, resume, free, destroy);
//  - a renamed directory is followed; a removed one fails the pause of an
//    allocation that has no file yet (BACKEND, naming it, nothing paused)
//    until its path is named again;
//  - a backup file stays open in the pool from its first pause on and is
//    never opened again by its name: a symbolic link or another file put at
//    its name never receives a byte and is never loaded by a resume (which
//    restores the allocation's own bytes), nor removed by the free or the
//    destroy; the pool's own file, if someone moved it, is emptied instead;
//    one someone removed still holds the bytes (the pool's descriptor);
//  - a randomised attacker doing all of that between the pool's calls never
//    makes a byte land outside the pool's files or a foreign byte reach an
//    allocation, and no file of the pool keeps bytes after the destroy.
// docs/misuse.md rows S2-S4.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "pool_util.hpp"

namespace {

constexpr uint64_t kPage = 64 << 10;
constexpr uint32_t kDisk = VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_BACKUP_DISK;

void remove_tree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") remove_tree(path + "/" + n);
      }
      closedir(d);
    }
    rmdir(path.c_str());
  } else {
    unlink(path.c_str());
  }
}

// A directory of its own under /tmp, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/vpmm-dirtest-XXXXXX";
    if (mkdtemp(t)) path = t;
  }
  ~TempDir() { remove_tree(path); }
  std::string sub(const std::string& name) const { return path + "/" + name; }
};

// Names in `dir` (lstat: links are not followed), sorted.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}
std::vector<std::string> backup_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& n : names_in(dir))
    if (n.rfind("vpmm-backup-", 0) == 0) out.push_back(n);
  return out;
}

bool write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

std::string read_file(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return "<missing>";
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}
bool is_symlink(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// 64 MiB of host memory in kPage pages, the environment ignored (the tests
// set VPMM_BACKUP_DIR themselves where they mean to).
vpmm_pool* host_pool() {
  vt::HostPoolSpec s;
  s.page = kPage;
  s.va_pages = 512;
  s.capacity = 64ull << 20;
  s.defaults_only = true;
  return vt::make_host_pool(s);
}

void* disk_alloc(vpmm_pool* p, uint64_t bytes, const std::string& dir, vpmm_status* st = nullptr,
                 const char* tag = "w") {
  vpmm_alloc_attrs a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.flags = kDisk;
  a.tag = tag;
  a.backup_dir = dir.c_str();
  void* out = nullptr;
  vpmm_status rs = vpmm_pool_malloc_ex(p, bytes, nullptr, &a, &out);
  if (st) *st = rs;
  return rs == VPMM_OK ? out : nullptr;
}

// A disk-backed allocation of `bytes` in `dir`, filled with vt::fill's pattern `seed`.
void* filled(vpmm_pool* p, uint64_t bytes, const std::string& dir, uint64_t seed) {
  void* a = disk_alloc(p, bytes, dir);
  CHECK(a != nullptr);
  if (a) vt::fill(a, bytes, seed);
  return a;
}

vpmm_tag_stats tag_stats(vpmm_pool* p, const char* tag = "w") {
  vpmm_tag_stats t;
  std::memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  vpmm_pool_tag_stats(p, tag, &t);
  return t;
}

bool names(const char* needle) { return std::strstr(vpmm_last_error(), needle) != nullptr; }

// Restores the working directory at the end of a test that changes it.
struct KeepCwd {
  char saved[4096] = "";
  KeepCwd() { CHECK(getcwd(saved, sizeof saved) != nullptr); }
  ~KeepCwd() {
    if (*saved) CHECK_EQ(chdir(saved), 0);
  }
};

}  // namespace

TEST("a backup directory that does not exist, or is no directory, fails the malloc naming it") {
  TempDir t;
  CHECK(write_file(t.sub("plain"), "x"));
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  for (const std::string& bad : {t.sub("missing"), t.sub("plain"), t.sub("plain/sub"), t.sub("missing/sub")}) {
    vpmm_status st = VPMM_OK;
    CHECK(disk_alloc(p, 2 * kPage, bad, &st) == nullptr);
    CHECK_EQ(st, VPMM_ERR_INVALID_ARGUMENT);
    CHECK(names(bad.c_str()));
    CHECK(names("vpmm_pool_malloc_ex"));
    CHECK_EQ(vpmm_pool_set_backup_dir(p, bad.c_str()), VPMM_ERR_INVALID_ARGUMENT);
    CHECK(names(bad.c_str()));
    // VPMM_BACKUP_DIR (read with the options, when a pool is made) is checked at the malloc too.
    setenv("VPMM_BACKUP_DIR", bad.c_str(), 1);
    vpmm_pool* q = host_pool();
    unsetenv("VPMM_BACKUP_DIR");
    CHECK(q != nullptr);
    void* x = q ? vt::malloc_tagged(q, kPage, "w", kDisk, nullptr, &st) : nullptr;
    if (q) vpmm_pool_destroy(q);
    CHECK(x == nullptr);
    CHECK_EQ(st, VPMM_ERR_INVALID_ARGUMENT);
    CHECK(names(bad.c_str()));
    // A scope does not know the pool: its malloc fails.
    vpmm_alloc_attrs a;
    std::memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.flags = kDisk;
    a.tag = "w";
    a.backup_dir = bad.c_str();
    CHECK_OK(vpmm_tag_scope_push_ex(&a));
    x = nullptr;
    CHECK_EQ(vpmm_pool_malloc(p, kPage, nullptr, &x), VPMM_ERR_INVALID_ARGUMENT);
    CHECK(x == nullptr);
    CHECK_OK(vpmm_tag_scope_pop());
  }
  const vpmm_stats s = vt::stats(p);  // nothing allocated, nothing mapped
  CHECK_EQ(s.n_live, uint64_t(0));
  CHECK_EQ(s.n_malloc, uint64_t(0));
  CHECK_EQ(s.mapped_bytes, uint64_t(0));
  CHECK_EQ(names_in(t.path).size(), size_t(1));  // nothing made anywhere
  // Made afterwards, the same path works.
  CHECK_EQ(mkdir(t.sub("missing").c_str(), 0700), 0);
  void* a = disk_alloc(p, 2 * kPage, t.sub("missing"));
  CHECK(a != nullptr);
  vt::fill(a, 2 * kPage, 1);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_EQ(backup_files(t.sub("missing")).size(), size_t(1));
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(a, 2 * kPage, 1));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK(backup_files(t.sub("missing")).empty());
}

TEST("a relative backup directory keeps naming the directory of the first malloc after a chdir") {
  KeepCwd keep;
  TempDir t, elsewhere;
  CHECK_EQ(mkdir(t.sub("rel").c_str(), 0700), 0);
  CHECK_EQ(mkdir(elsewhere.sub("rel").c_str(), 0700), 0);  // the same name under the new cwd
  CHECK_EQ(chdir(t.path.c_str()), 0);
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  void* a = disk_alloc(p, 3 * kPage, "rel");
  void* b = disk_alloc(p, 2 * kPage, "rel");
  CHECK(a && b);
  vt::fill(a, 3 * kPage, 1);
  vt::fill(b, 2 * kPage, 2);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_EQ(backup_files(t.sub("rel")).size(), size_t(2));
  CHECK_EQ(chdir(elsewhere.path.c_str()), 0);
  CHECK_OK(vpmm_pool_resume(p, "w"));  // failed: "No such file or directory"
  CHECK(vt::verify(a, 3 * kPage, 1));
  CHECK(vt::verify(b, 2 * kPage, 2));
  // Named again after the chdir: still the first directory.
  void* c = filled(p, kPage, "rel", 3);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_EQ(backup_files(t.sub("rel")).size(), size_t(3));
  CHECK(backup_files(elsewhere.sub("rel")).empty());
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(c, kPage, 3));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));  // its file goes, from the right directory
  CHECK_EQ(backup_files(t.sub("rel")).size(), size_t(2));
  CHECK_OK(vpmm_pool_destroy(p));  // and the rest
  CHECK(backup_files(t.sub("rel")).empty());
  CHECK(names_in(elsewhere.sub("rel")).empty());
}

TEST("a renamed backup directory is followed; a removed one fails a new file's pause until named again") {
  TempDir t;
  CHECK_EQ(mkdir(t.sub("d").c_str(), 0700), 0);
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  void* a = disk_alloc(p, 2 * kPage, t.sub("d"));
  CHECK(a != nullptr);
  vt::fill(a, 2 * kPage, 1);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_EQ(rename(t.sub("d").c_str(), t.sub("d2").c_str()), 0);
  CHECK_OK(vpmm_pool_resume(p, "w"));  // read from the renamed directory
  CHECK(vt::verify(a, 2 * kPage, 1));
  // A directory of the old name appears: the pool keeps the one it opened.
  CHECK_EQ(mkdir(t.sub("d").c_str(), 0700), 0);
  vt::fill(a, 2 * kPage, 2);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_EQ(backup_files(t.sub("d2")).size(), size_t(1));
  CHECK(backup_files(t.sub("d")).empty());
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(a, 2 * kPage, 2));
  void* c = disk_alloc(p, kPage, t.sub("d"), nullptr, "c");  // the directory the pool opened: d2
  CHECK(c != nullptr);
  vt::fill(c, kPage, 5);
  // Removed, with a's file: a's file stays open in the pool, so a pauses
  // and resumes as before; c has no file yet and cannot make one there.
  remove_tree(t.sub("d2"));
  vt::fill(a, 2 * kPage, 3);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(a, 2 * kPage, 3));
  CHECK_EQ(vpmm_pool_pause(p, "c"), VPMM_ERR_BACKEND);
  CHECK(names(t.sub("d").c_str()));
  CHECK_EQ(tag_stats(p, "c").n_paused, uint64_t(0));
  CHECK(vt::verify(c, kPage, 5));  // active and intact
  // Its path named again, now that a directory exists there (the "d" made
  // above), it is opened anew, for c too.
  void* b = disk_alloc(p, 2 * kPage, t.sub("d"));
  CHECK(b != nullptr);
  vt::fill(b, 2 * kPage, 4);
  CHECK_OK(vpmm_pool_pause(p, "c"));
  CHECK_EQ(backup_files(t.sub("d")).size(), size_t(1));
  CHECK_OK(vpmm_pool_resume(p, "c"));
  CHECK(vt::verify(c, kPage, 5));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK(backup_files(t.sub("d")).empty());
}

TEST("a backup directory replaced by a symbolic link: the pool keeps writing where it opened") {
  TempDir t, other;
  CHECK_EQ(mkdir(t.sub("d").c_str(), 0700), 0);
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  void* a = disk_alloc(p, 2 * kPage, t.sub("d"));
  void* b = disk_alloc(p, kPage, t.sub("d"));
  CHECK(a && b);
  vt::fill(a, 2 * kPage, 1);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK_EQ(rename(t.sub("d").c_str(), t.sub("moved").c_str()), 0);
  CHECK_EQ(symlink(other.path.c_str(), t.sub("d").c_str()), 0);
  vt::fill(a, 2 * kPage, 2);
  vt::fill(b, kPage, 3);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK(names_in(other.path).empty());  // nothing through the link
  CHECK_EQ(backup_files(t.sub("moved")).size(), size_t(2));
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(a, 2 * kPage, 2));
  CHECK(vt::verify(b, kPage, 3));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK(backup_files(t.sub("moved")).empty());
  CHECK(names_in(other.path).empty());
}

// The one backup file of `dir` (the allocation's, made at its first pause).
std::string only_file(const std::string& dir) {
  std::vector<std::string> f = backup_files(dir);
  CHECK_EQ(f.size(), size_t(1));
  return f.empty() ? std::string("<none>") : dir + "/" + f[0];
}

TEST("a symbolic link put at a kept backup file's name receives no byte: the pool writes its own file") {
  TempDir t, victim_dir;
  const std::string victim = victim_dir.sub("weights-go-here");
  CHECK(write_file(victim, "the victim's own bytes"));
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  void* a = filled(p, 2 * kPage, t.path, 1);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_OK(vpmm_pool_resume(p, "w"));  // the file stays for the next pause
  const std::string name = only_file(t.path);
  CHECK_EQ(rename(name.c_str(), t.sub("moved").c_str()), 0);
  CHECK_EQ(symlink(victim.c_str(), name.c_str()), 0);
  vt::fill(a, 2 * kPage, 2);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_EQ(read_file(victim), std::string("the victim's own bytes"));  // got the weights before
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(a, 2 * kPage, 2));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK(is_symlink(name));  // not the pool's: left alone (the free unlinked it before)
  CHECK_EQ(read_file(victim), std::string("the victim's own bytes"));
  struct stat st;  // the pool's own file, moved: emptied at the free
  CHECK_EQ(stat(t.sub("moved").c_str(), &st), 0);
  CHECK_EQ(st.st_size, off_t(0));
  CHECK_OK(vpmm_pool_destroy(p));
}

TEST("a file swapped in while paused is never loaded: the resume restores the allocation's own bytes") {
  for (int kind = 0; kind < 2; ++kind) {
    TempDir t;
    vpmm_pool* p = host_pool();
    CHECK(p != nullptr);
    void* a = filled(p, 2 * kPage, t.path, 1);
    CHECK_OK(vpmm_pool_pause(p, "w"));
    const std::string name = only_file(t.path);
    CHECK_EQ(rename(name.c_str(), t.sub("kept").c_str()), 0);
    if (kind == 0)
      CHECK(write_file(name, std::string(2 * kPage, 'Z')));  // a file of the attacker's, the right size
    else
      CHECK_EQ(symlink(t.sub("kept").c_str(), name.c_str()), 0);  // a link to the pool's own file
    CHECK_OK(vpmm_pool_resume(p, "w"));
    CHECK(vt::verify(a, 2 * kPage, 1));  // the 'Z's were loaded before
    vt::fill(a, 2 * kPage, 2);
    CHECK_OK(vpmm_pool_pause(p, "w"));  // into the pool's own file, wherever it is now
    CHECK_OK(vpmm_pool_resume(p, "w"));
    CHECK(vt::verify(a, 2 * kPage, 2));
    if (kind == 0) CHECK_EQ(read_file(name), std::string(2 * kPage, 'Z'));  // never written
    CHECK(kind == 0 || is_symlink(name));
    CHECK_OK(vpmm_pool_check(p));
    CHECK_OK(vpmm_pool_destroy(p));
    // The pool's own file, moved away by someone, keeps no bytes; what was
    // put at its name stays.
    struct stat st;
    CHECK_EQ(stat(t.sub("kept").c_str(), &st), 0);
    CHECK_EQ(st.st_size, off_t(0));
    CHECK(kind == 0 ? read_file(name) == std::string(2 * kPage, 'Z') : is_symlink(name));
  }
}

TEST("the free and the destroy remove only the files the pool made") {
  TempDir t;
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  void* a = disk_alloc(p, 2 * kPage, t.path, nullptr, "a");
  void* b = disk_alloc(p, kPage, t.path, nullptr, "b");
  CHECK(a && b);
  CHECK_OK(vpmm_pool_pause(p, "a"));
  CHECK_OK(vpmm_pool_resume(p, "a"));
  const std::string fa = only_file(t.path);
  CHECK_OK(vpmm_pool_pause(p, "b"));  // b stays paused: its file is its only copy
  std::string fb;
  for (const std::string& n : backup_files(t.path))
    if (t.path + "/" + n != fa) fb = t.path + "/" + n;
  CHECK(!fb.empty());
  // Someone else's files at both names.
  CHECK_EQ(unlink(fa.c_str()), 0);
  CHECK(write_file(fa, "someone else's"));
  CHECK_EQ(rename(fb.c_str(), t.sub("b-moved").c_str()), 0);
  CHECK(write_file(fb, "someone else's too"));
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  CHECK_EQ(read_file(fa), std::string("someone else's"));  // was unlinked before
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK_EQ(read_file(fb), std::string("someone else's too"));
}

TEST("a small allocation's backup file goes with its last block, though the slab stays cached") {
  // A small tagged allocation lives in a slab; the pool keeps an empty slab
  // cached. Its backup (the blocks' bytes) must not outlive the blocks: the
  // file is removed at the free, and a file moved away is emptied.
  for (int moved = 0; moved < 2; ++moved) {
    TempDir t;
    vpmm_pool* p = host_pool();
    CHECK(p != nullptr);
    void* a = disk_alloc(p, 3000, t.path, nullptr, "s");
    CHECK(a != nullptr);
    if (!a) break;
    vt::fill(a, 3000, 7);
    CHECK_OK(vpmm_pool_pause(p, "s"));
    CHECK_OK(vpmm_pool_resume(p, "s"));
    CHECK(vt::verify(a, 3000, 7));
    const std::string f = only_file(t.path);
    CHECK(!f.empty());
    if (moved) CHECK_EQ(rename(f.c_str(), t.sub("moved").c_str()), 0);
    CHECK_OK(vpmm_pool_free(p, a, nullptr));
    CHECK(backup_files(t.path).empty());
    if (moved) CHECK_EQ(read_file(t.sub("moved")), std::string());
    CHECK_EQ(vt::stats(p).backup_disk_bytes, 0u);
    // The cached slab serves and pauses again, with a file of its own.
    void* b = disk_alloc(p, 3000, t.path, nullptr, "s");
    CHECK(b != nullptr);
    if (b) {
      vt::fill(b, 3000, 8);
      CHECK_OK(vpmm_pool_pause(p, "s"));
      CHECK_EQ(backup_files(t.path).size(), size_t(1));
      CHECK_OK(vpmm_pool_resume(p, "s"));
      CHECK(vt::verify(b, 3000, 8));
      CHECK_OK(vpmm_pool_free(p, b, nullptr));
    }
    CHECK(backup_files(t.path).empty());
    CHECK_OK(vpmm_pool_destroy(p));
  }
}

TEST("a backup file removed by someone else: the pool's descriptor still holds the bytes") {
  TempDir t;
  vpmm_pool* p = host_pool();
  CHECK(p != nullptr);
  void* a = filled(p, 2 * kPage, t.path, 1);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_EQ(unlink(only_file(t.path).c_str()), 0);  // while paused: its only copy
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(a, 2 * kPage, 1));
  vt::fill(a, 2 * kPage, 2);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK(backup_files(t.path).empty());
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(a, 2 * kPage, 2));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK(names_in(t.path).empty());
}

// The randomised attacker: between the pool's calls it replaces backup
// files with links to a victim or files of its own, removes or moves them,
// puts moved ones back, renames the directory back and forth, and changes
// the working directory. Whatever it did: the victim keeps its bytes, every
// resume succeeds and restores exactly the allocation's bytes (never the
// attacker's), the pool stays consistent, and at the end every file the
// pool made is gone or, where someone moved it, empty.
TEST("a randomised attacker of the backup directory never redirects or injects a byte") {
  KeepCwd keep;
  for (uint64_t seed : {1, 2, 3, 4, 5, 6}) {
    TempDir t, victim_dir;
    const std::string victim = victim_dir.sub("victim");
    CHECK(write_file(victim, "victim"));
    CHECK_EQ(mkdir(t.sub("d").c_str(), 0700), 0);
    CHECK_EQ(chdir(t.path.c_str()), 0);
    std::mt19937_64 rng(seed);
    vpmm_pool* p = host_pool();
    CHECK(p != nullptr);
    if (!p) return;
    struct A {
      void* p;
      uint64_t bytes;
      uint64_t seed;
      std::string tag;
    };
    std::vector<A> live;
    bool dir_renamed = false;
    uint64_t next_seed = 1, resumes = 0, attacks = 0;
    for (int step = 0; step < 160; ++step) {
      const std::string dir = t.sub(dir_renamed ? "d-renamed" : "d");
      switch (rng() % 10) {
        case 0:
        case 1: {  // a disk-backed allocation, named relatively
          const uint64_t bytes = (1 + rng() % 3) * kPage;
          const std::string tag = "t" + std::to_string(rng() % 3);
          vpmm_status st = VPMM_OK;
          void* q = disk_alloc(p, bytes, "d", &st, tag.c_str());
          if (!q) break;  // "d" may be renamed away: IA (not there) is fine
          vt::fill(q, bytes, next_seed);
          live.push_back({q, bytes, next_seed++, tag});
          break;
        }
        case 2:
        case 3: {  // pause a tag
          const std::string tag = "t" + std::to_string(rng() % 3);
          vpmm_status st = vpmm_pool_pause(p, tag.c_str());
          CHECK(st == VPMM_OK || st == VPMM_ERR_BACKEND || st == VPMM_ERR_INVALID_ARGUMENT);
          break;
        }
        case 4:
        case 5: {  // resume a tag; what resumed holds its own bytes
          const std::string tag = "t" + std::to_string(rng() % 3);
          vpmm_status st = vpmm_pool_resume(p, tag.c_str());
          CHECK(st == VPMM_OK || st == VPMM_ERR_INVALID_ARGUMENT);  // IA: a tag never used
          if (st == VPMM_OK) ++resumes;
          break;
        }
        case 6: {  // free one (paused or not)
          if (live.empty()) break;
          const size_t i = rng() % live.size();
          CHECK_OK(vpmm_pool_free(p, live[i].p, nullptr));
          live.erase(live.begin() + static_cast<long>(i));
          break;
        }
        default: {  // an attack
          ++attacks;
          std::vector<std::string> files = backup_files(dir);
          const std::string f = files.empty() ? std::string() : dir + "/" + files[rng() % files.size()];
          switch (rng() % 6) {
            case 0:
              if (!f.empty() && rename(f.c_str(), (dir + "/moved-" + std::to_string(step)).c_str()) == 0)
                symlink(victim.c_str(), f.c_str());
              break;
            case 1:
              if (!f.empty() && rename(f.c_str(), (dir + "/moved-" + std::to_string(step)).c_str()) == 0)
                write_file(f, std::string(kPage, 'Z'));
              break;
            case 2:
              if (!f.empty()) unlink(f.c_str());
              break;
            case 3: {  // a moved file back at its old name is the pool's file again: fine
              for (const std::string& n : names_in(dir))
                if (n.rfind("moved-", 0) == 0 && !f.empty()) {
                  unlink(f.c_str());
                  rename((dir + "/" + n).c_str(), f.c_str());
                  break;
                }
              break;
            }
            case 4:
              if (rename(dir.c_str(), t.sub(dir_renamed ? "d" : "d-renamed").c_str()) == 0)
                dir_renamed = !dir_renamed;
              break;
            default:
              CHECK_EQ(chdir((rng() % 2 ? victim_dir.path : t.path).c_str()), 0);
              break;
          }
        }
      }
      CHECK_EQ(read_file(victim), std::string("victim"));
      CHECK_OK(vpmm_pool_check(p));
      // Every active allocation holds its own bytes.
      vpmm_tag_stats ts[3];
      for (int k = 0; k < 3; ++k) ts[k] = tag_stats(p, ("t" + std::to_string(k)).c_str());
      for (const A& x : live) {
        const int k = x.tag[1] - '0';
        if (ts[k].n_paused == 0) CHECK(vt::verify(x.p, x.bytes, x.seed));
      }
    }
    CHECK_OK(vpmm_pool_resume(p, nullptr));
    for (const A& x : live) CHECK(vt::verify(x.p, x.bytes, x.seed));
    CHECK_OK(vpmm_pool_check(p));
    CHECK_OK(vpmm_pool_destroy(p));
    CHECK_EQ(read_file(victim), std::string("victim"));
    // What is left: the attacker's links and files, and the pool's files it
    // moved, emptied (no weights stay on disk).
    for (const char* d : {"d", "d-renamed"})
      for (const std::string& n : names_in(t.sub(d))) {
        const std::string f = t.sub(d) + "/" + n;
        struct stat st;
        CHECK_EQ(lstat(f.c_str(), &st), 0);
        const bool attackers = S_ISLNK(st.st_mode) || read_file(f) == std::string(kPage, 'Z');
        if (!attackers && st.st_size != 0) std::printf("  left with %lld bytes: %s\n", (long long)st.st_size, f.c_str());
        CHECK(attackers || st.st_size == 0);
      }
    std::printf("  seed %llu: %llu attacks, %llu resumes\n", static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(attacks), static_cast<unsigned long long>(resumes));
  }
}

TEST_MAIN()
