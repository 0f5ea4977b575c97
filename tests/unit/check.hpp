// The one test harness of the repository (unit, conformance and GPU suites):
// CHECK records a failure and goes on; the program ends with the plain
// "N passed, N failed" line that CI reads and exits non-zero on any failure.
// Each TEST is one counted case.
//
// Suites with needs of their own build on it rather than copy it: run_all
// takes RunOptions (a setup that may skip the program with exit 77, a check
// after every case, a banner and timings), and fail_hook() adds a line to
// every failure report (the GPU suite prints vpmm_last_error there). Plain
// C++17 host code, so nvcc can include it from .cu files. It calls nothing of
// libvpmm itself (test_trace and test_snapshot link without it); only the
// CHECK_OK macro does, where it is used.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace vt {

struct Case {
  const char* name;
  std::function<void()> fn;
};
inline std::vector<Case>& cases() {
  static std::vector<Case> c;
  return c;
}
inline int& case_failures() {
  static int f = 0;
  return f;
}
struct Registrar {
  Registrar(const char* name, std::function<void()> fn) { cases().push_back({name, std::move(fn)}); }
};

// Called after every failure report, when set (one extra line of context).
inline void (*&fail_hook())() {
  static void (*hook)() = nullptr;
  return hook;
}

// Counts a failure of the current case and says where it happened.
inline void report_fail(const char* file, int line, const char* what) {
  ++case_failures();
  std::printf("  %s:%d: %s failed\n", file, line, what);
  if (fail_hook()) fail_hook()();
  std::fflush(stdout);
}

struct RunOptions {
  void (*before_all)() = nullptr;  // runs first; may print "SKIP: ..." and exit(77)
  void (*after_case)() = nullptr;  // runs after each case; its CHECKs count for the case
  bool banner = false;             // print "---- NAME" before each case
  bool timing = false;             // add "(N ms)" to each case's result line
};

// Runs every case (or those whose name contains argv[1]).
inline int run_all(int argc, char** argv, const RunOptions& o = RunOptions()) {
  if (o.before_all) o.before_all();
  int passed = 0, failed = 0;
  const char* only = argc > 1 ? argv[1] : nullptr;
  for (auto& c : cases()) {
    if (only && std::string(c.name).find(only) == std::string::npos) continue;
    case_failures() = 0;
    if (o.banner) {
      std::printf("---- %s\n", c.name);
      std::fflush(stdout);
    }
    auto t0 = std::chrono::steady_clock::now();
    c.fn();
    if (o.after_case) o.after_case();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const bool ok = case_failures() == 0;
    if (ok)
      ++passed;
    else
      ++failed;
    if (o.timing)
      std::printf("%s %s (%.0f ms)\n", ok ? "ok  " : "FAIL", c.name, ms);
    else
      std::printf("%s %s\n", ok ? "ok  " : "FAIL", c.name);
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

}  // namespace vt

#define VT_CAT2(a, b) a##b
#define VT_CAT(a, b) VT_CAT2(a, b)
#define TEST(name)                                                     \
  static void VT_CAT(test_fn_, __LINE__)();                            \
  static vt::Registrar VT_CAT(test_reg_, __LINE__)(name, VT_CAT(test_fn_, __LINE__)); \
  static void VT_CAT(test_fn_, __LINE__)()

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) vt::report_fail(__FILE__, __LINE__, "CHECK(" #cond ")");        \
  } while (0)

// CHECK_MSG(cond, printf-format, ...): CHECK with a line of explanation.
#define CHECK_MSG(cond, ...)                                                     \
  do {                                                                           \
    if (!(cond)) {                                                               \
      vt::report_fail(__FILE__, __LINE__, "CHECK(" #cond ")");                   \
      std::printf("       ");                                                    \
      std::printf(__VA_ARGS__);                                                  \
      std::printf("\n");                                                         \
    }                                                                            \
  } while (0)

#define CHECK_EQ(a, b)                                                           \
  do {                                                                           \
    auto va_ = (a);                                                              \
    auto vb_ = (b);                                                              \
    if (!(va_ == vb_)) {                                                         \
      vt::report_fail(__FILE__, __LINE__, "CHECK_EQ(" #a ", " #b ")");           \
      std::printf("       %s vs %s\n", vt::show(va_).c_str(), vt::show(vb_).c_str()); \
    }                                                                            \
  } while (0)

// CHECK_OK(call): the call returned VPMM_OK (prints vpmm_last_error otherwise).
#define CHECK_OK(call)                                                           \
  do {                                                                           \
    vpmm_status st_ = (call);                                                    \
    if (st_ != VPMM_OK) {                                                        \
      vt::report_fail(__FILE__, __LINE__, #call " == VPMM_OK");                  \
      std::printf("       got %s: %s\n", vpmm_status_string(st_), vpmm_last_error()); \
    }                                                                            \
  } while (0)

#define TEST_MAIN() \
  int main(int argc, char** argv) { return vt::run_all(argc, argv); }

namespace vt {
inline std::string show(const std::string& s) { return "\"" + s + "\""; }
inline std::string show(const char* s) { return s ? show(std::string(s)) : "NULL"; }
inline std::string show(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}
inline std::string show(void* p) { return show(static_cast<const void*>(p)); }
inline std::string show(std::nullptr_t) { return "nullptr"; }
template <typename T>
std::string show(T* p) {
  return show(static_cast<const void*>(p));
}
template <typename T>
std::string show(const T& v) {
  return std::to_string(v);
}
}  // namespace vt
