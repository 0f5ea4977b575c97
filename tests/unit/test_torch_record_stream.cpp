// The PyTorch hooks' record_stream (vpmm_torch_record_stream) on the host
// backend's default pool, over host streams: memory a tensor freed after
// being used on other streams is not a third stream's before the work of
// its own stream and of every recorded one, and the free orders after that
// work on the GPU side, never blocking the CPU on a held stream.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "check.hpp"
#include "host_kernels.hpp"
#include "pool_util.hpp"
#include "vpmm_host_streams.h"

namespace {

using vt::Fill;
using vt::Stamp;
using vt::fill_on_stream;
using vt::stamp;

bool host_default_pool(vpmm_pool** dp) {
  *dp = nullptr;
  CHECK_OK(vpmm_default_pool(0, dp));
  // On a GPU machine the default pool is the device's: host streams are not its.
  return *dp && std::strcmp(vpmm_pool_backend_name(*dp), "host") == 0;
}

// PyTorch's pattern: a tensor allocated on A, its own kernel still queued on
// A (held: a GPU that is behind), used on the streams `recorded`
// (Tensor.record_stream, whose work may be held too), freed by PyTorch on A;
// then a tensor of the same size on a third stream C, filled there at once.
// Wherever the two overlap, C's fill must run after A's kernel (and after
// every recorded stream's work): C's bytes must be intact at the end.
void record_then_third_stream(const std::vector<vpmm_stream>& recorded, const std::vector<vpmm_stream>& held) {
  vpmm_pool* dp = nullptr;
  if (!host_default_pool(&dp)) return;
  vpmm_stream a = nullptr, c = nullptr;
  CHECK_OK(vpmm_host_stream_create(&a));
  CHECK_OK(vpmm_host_stream_create(&c));
  const ptrdiff_t n = 4 << 20;
  void* p = vpmm_torch_malloc(n, 0, a);
  CHECK(p != nullptr);
  if (!p) return;
  Stamp late{p, static_cast<uint64_t>(n), 0x5a};
  CHECK_OK(vpmm_host_stream_hold(a));
  CHECK_OK(vpmm_host_stream_launch(a, stamp, &late));  // the tensor's own kernel, pending
  for (vpmm_stream s : held) CHECK_OK(vpmm_host_stream_hold(s));
  for (vpmm_stream s : recorded) vpmm_torch_record_stream(p, s);
  vpmm_torch_free(p, n, 0, a);
  void* q = vpmm_torch_malloc(n, 0, c);
  CHECK(q != nullptr);
  if (!q) return;
  Fill mine{q, static_cast<uint64_t>(n), 42};
  CHECK_OK(vpmm_host_stream_launch(c, fill_on_stream, &mine));
  const char* pc = static_cast<const char*>(p);
  const char* qc = static_cast<const char*>(q);
  const bool overlap = qc < pc + n && pc < qc + n;
  // Reused: C's fill waits for held A (synchronize says so instead of
  // running it). Not reused: nothing to wait for. No race decides this.
  if (overlap) CHECK_EQ(vpmm_host_stream_synchronize(c), VPMM_ERR_WRONG_STATE);
  CHECK_EQ(late.ran.load(), 0);
  CHECK_OK(vpmm_host_stream_release(a));
  for (vpmm_stream s : held) CHECK_OK(vpmm_host_stream_release(s));
  CHECK_OK(vpmm_host_stream_synchronize(a));
  for (vpmm_stream s : recorded) CHECK_OK(vpmm_host_stream_synchronize(s));
  CHECK_OK(vpmm_host_stream_synchronize(c));
  CHECK_EQ(late.ran.load(), 1);
  CHECK(vt::verify(q, n, 42));  // A's late kernel did not land in C's tensor
  vpmm_torch_free(q, n, 0, c);
  CHECK_OK(vpmm_pool_check(dp));
  CHECK_OK(vpmm_pool_stream_retire(dp, a));
  CHECK_OK(vpmm_pool_stream_retire(dp, c));
  for (vpmm_stream s : recorded) CHECK_OK(vpmm_pool_stream_retire(dp, s));
  CHECK_OK(vpmm_host_stream_destroy(a));
  CHECK_OK(vpmm_host_stream_destroy(c));
}

}  // namespace

TEST("freed after record_stream on B, a tensor is not a third stream's before its own stream's work") {
  vpmm_stream b = nullptr;
  CHECK_OK(vpmm_host_stream_create(&b));
  record_then_third_stream({b}, {});
  CHECK_OK(vpmm_host_stream_destroy(b));
}

TEST("recorded on two streams, the first held: the free orders after it without blocking the CPU") {
  vpmm_stream b = nullptr, d = nullptr;
  CHECK_OK(vpmm_host_stream_create(&b));
  CHECK_OK(vpmm_host_stream_create(&d));
  // d's held work keeps d's point pending: a CPU wait could not complete
  // (synchronize refuses a held stream), a GPU-side one can.
  record_then_third_stream({d, b}, {d});
  CHECK_OK(vpmm_host_stream_destroy(d));
  CHECK_OK(vpmm_host_stream_destroy(b));
}

// The recorded stream's own work on the tensor: B still writes it (held)
// when PyTorch frees it on A, whose work is done. The memory must not be a
// third stream's before B's write lands: C's tensor stays intact. Were the
// record dropped, the free would be A's alone, reusable on C once A is
// synchronized, and B's late write would land in C's tensor.
TEST("a recorded stream's late write to a freed tensor never lands in a third stream's tensor") {
  vpmm_pool* dp = nullptr;
  if (!host_default_pool(&dp)) return;
  vpmm_stream a = nullptr, b = nullptr, c = nullptr;
  CHECK_OK(vpmm_host_stream_create(&a));
  CHECK_OK(vpmm_host_stream_create(&b));
  CHECK_OK(vpmm_host_stream_create(&c));
  const ptrdiff_t n = 4 << 20;
  void* p = vpmm_torch_malloc(n, 0, a);
  CHECK(p != nullptr);
  if (!p) return;
  Stamp late{p, static_cast<uint64_t>(n), 0x5a};
  CHECK_OK(vpmm_host_stream_hold(b));
  CHECK_OK(vpmm_host_stream_launch(b, stamp, &late));  // B's use of the tensor, pending
  vpmm_torch_record_stream(p, b);
  vpmm_torch_free(p, n, 0, a);
  CHECK_OK(vpmm_pool_stream_synchronize(dp, a));  // A's side of the free is complete, as the pool knows
  void* q = vpmm_torch_malloc(n, 0, c);
  CHECK(q != nullptr);
  if (!q) return;
  Fill mine{q, static_cast<uint64_t>(n), 42};
  CHECK_OK(vpmm_host_stream_launch(c, fill_on_stream, &mine));
  // C's fill runs now unless C waits for held B (synchronize then says so
  // instead of running it): memory of the freed tensor, at its VA or
  // remapped to another, may be C's only after B's write. A fill that runs
  // now on that memory is overwritten when B is released.
  const vpmm_status now = vpmm_host_stream_synchronize(c);
  CHECK(now == VPMM_OK || now == VPMM_ERR_WRONG_STATE);
  CHECK_OK(vpmm_host_stream_release(b));
  CHECK_OK(vpmm_host_stream_synchronize(b));
  CHECK_OK(vpmm_host_stream_synchronize(c));
  CHECK_EQ(late.ran.load(), 1);
  CHECK(vt::verify(q, n, 42));  // B's late write did not land in C's tensor
  vpmm_torch_free(q, n, 0, c);
  CHECK_OK(vpmm_pool_check(dp));
  for (vpmm_stream s : {a, b, c}) {
    CHECK_OK(vpmm_pool_stream_retire(dp, s));
    CHECK_OK(vpmm_host_stream_destroy(s));
  }
}

TEST_MAIN()
