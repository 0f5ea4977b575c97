// The disk store's directory under attack, through the public API on the
// host backend (issue 35 items 6 and 7, issue 36 item 6): whoever can write
// the backup directory may rename, remove or replace what is in it between
// two calls of the pool, and the process may chdir. What must hold:
//  - a directory that does not exist, or is no directory, fails the malloc
//    that names it (INVALID_ARGUMENT, naming it), with nothing allocated;
//  - a relative directory names the directory of the first call that named
//    it; a chdir later changes nothing (pause, resume, free, destroy);
//  - a renamed directory is followed; a removed one fails the next pause
//    (BACKEND, naming it, nothing paused) until its path is named again;
//  - a backup file replaced at its name (a symbolic link, another file)
//    never receives a byte, is never loaded by a resume and never removed:
//    the pause makes a new file, the resume fails (BACKEND) and leaves the
//    allocation paused with its backup, which resumes once the file is back;
//  - a randomised attacker doing all of that between the pool's calls never
//    makes a byte land outside the directory or a foreign byte reach an
//    allocation, and the pool leaves no file of its own behind.
// docs/misuse.md rows S2-S5.
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

vpmm_pool* host_pool() {
  vpmm_config c;
  vpmm_config_init_defaults(&c);
  c.backend = VPMM_BACKEND_HOST;
  c.page_size = kPage;
  c.va_size = 512 * kPage;
  c.host_capacity = 64ull << 20;
  vpmm_pool* p = nullptr;
  if (vpmm_pool_create(&c, &p) != VPMM_OK) std::printf("  create: %s\n", vpmm_last_error());
  return p;
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

TEST("36.6: a backup directory that does not exist, or is no directory, fails the malloc naming it") {
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
    // VPMM_BACKUP_DIR is read at the malloc too.
    setenv("VPMM_BACKUP_DIR", bad.c_str(), 1);
    void* x = vt::malloc_tagged(p, kPage, "w", kDisk, nullptr, &st);
    unsetenv("VPMM_BACKUP_DIR");
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

TEST("35.7: a relative backup directory keeps naming the directory of the first malloc after a chdir") {
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
  void* c = disk_alloc(p, kPage, "rel");
  CHECK(c != nullptr);
  vt::fill(c, kPage, 3);
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

TEST("35.7: a renamed backup directory is followed; a removed one fails the next pause until named again") {
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
  // Removed with its file: the next pause cannot make a new file there.
  remove_tree(t.sub("d2"));
  vt::fill(a, 2 * kPage, 3);
  CHECK_EQ(vpmm_pool_pause(p, "w"), VPMM_ERR_BACKEND);
  CHECK(names(t.sub("d").c_str()));
  CHECK_EQ(tag_stats(p).n_paused, uint64_t(0));
  CHECK(vt::verify(a, 2 * kPage, 3));  // active and intact
  // Its path named again, now that a directory exists there (the "d" made
  // above), it is opened anew.
  CHECK_OK(vpmm_pool_free(p, a, nullptr));
  void* b = disk_alloc(p, 2 * kPage, t.sub("d"));
  CHECK(b != nullptr);
  vt::fill(b, 2 * kPage, 4);
  CHECK_OK(vpmm_pool_pause(p, "w"));
  CHECK_EQ(backup_files(t.sub("d")).size(), size_t(1));
  CHECK_OK(vpmm_pool_resume(p, "w"));
  CHECK(vt::verify(b, 2 * kPage, 4));
  CHECK_OK(vpmm_pool_check(p));
  CHECK_OK(vpmm_pool_destroy(p));
  CHECK(backup_files(t.sub("d")).empty());
}

TEST("35.7: a backup directory replaced by a symbolic link: the pool keeps writing where it opened") {
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

TEST_MAIN()
