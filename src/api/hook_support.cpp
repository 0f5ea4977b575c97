// What the allocator hooks (src/hooks/) need beyond vpmm.h, provided by the C
// API layer: setting the thread's last error, reading the VPMM_LOG level and
// ordering one stream after another on the GPU.
// The hooks sit above this layer and include neither common/ nor core/; this
// file is their one door down (see hooks/report.hpp).
#include <cstdarg>

#include "api/pool_shell.hpp"
#include "common/status.hpp"
#include "common/settings.hpp"
#include "hooks/report.hpp"

namespace vpmm {

vpmm_status hook_fail(vpmm_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(status, fmt, ap);
  va_end(ap);
  return status;
}

bool hook_log_enabled(HookLog level) {
  static_assert(static_cast<int>(HookLog::kError) == static_cast<int>(LogLevel::kError) &&
                    static_cast<int>(HookLog::kWarn) == static_cast<int>(LogLevel::kWarn) &&
                    static_cast<int>(HookLog::kInfo) == static_cast<int>(LogLevel::kInfo) &&
                    static_cast<int>(HookLog::kDebug) == static_cast<int>(LogLevel::kDebug),
                "HookLog names the levels of LogLevel");
  return log_enabled(static_cast<LogLevel>(static_cast<int>(level)));
}

vpmm_status hook_stream_wait(vpmm_pool* pool, vpmm_stream waiter, vpmm_stream waited) {
  static const char* const call = "vpmm_torch_free";
  vpmm_status st = api::check_pool(call, pool);
  if (st != VPMM_OK) return st;
  return api::guarded(call, [&] { return pool->pool->stream_wait_stream(waiter, waited); });
}

}  // namespace vpmm
