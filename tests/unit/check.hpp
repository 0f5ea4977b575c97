// A minimal test harness: CHECK records a failure and goes on; the program
// ends with the plain "N passed, N failed" line that CI reads and exits
// non-zero on any failure. Each TEST is one counted case.
#pragma once

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

inline int run_all(int argc, char** argv) {
  int passed = 0, failed = 0;
  const char* only = argc > 1 ? argv[1] : nullptr;
  for (auto& c : cases()) {
    if (only && std::string(c.name).find(only) == std::string::npos) continue;
    case_failures() = 0;
    c.fn();
    if (case_failures() == 0) {
      ++passed;
      std::printf("ok   %s\n", c.name);
    } else {
      ++failed;
      std::printf("FAIL %s\n", c.name);
    }
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
    if (!(cond)) {                                                               \
      ++vt::case_failures();                                                     \
      std::printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);     \
    }                                                                            \
  } while (0)

#define CHECK_EQ(a, b)                                                           \
  do {                                                                           \
    auto va_ = (a);                                                              \
    auto vb_ = (b);                                                              \
    if (!(va_ == vb_)) {                                                         \
      ++vt::case_failures();                                                     \
      std::printf("  %s:%d: CHECK_EQ(%s, %s) failed: %s vs %s\n", __FILE__, __LINE__, #a, #b, \
                  vt::show(va_).c_str(), vt::show(vb_).c_str());                 \
    }                                                                            \
  } while (0)

// CHECK_OK(call): the call returned VPMM_OK (prints vpmm_last_error otherwise).
#define CHECK_OK(call)                                                           \
  do {                                                                           \
    vpmm_status st_ = (call);                                                    \
    if (st_ != VPMM_OK) {                                                        \
      ++vt::case_failures();                                                     \
      std::printf("  %s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call,    \
                  vpmm_status_string(st_), vpmm_last_error());                   \
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
