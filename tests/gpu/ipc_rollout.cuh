// The rollout side of the GPU sharing tests and benchmark (test_gpu_ipc.cu,
// bench/bench_ipc.cu): a command server over a Unix socket
// (tests/unit/ipc_harness.hpp) that imports exports into a CUDA pool of its
// own, reads, writes and copies them with kernels, and closes them.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "../unit/ipc_harness.hpp"
#include "gpu_util.cuh"

namespace gt {

inline vpmm_pool* ipc_cuda_pool(bool exportable) {
  vpmm_config c;
  vpmm_config_init(&c);
  c.backend = VPMM_BACKEND_CUDA;
  c.device = 0;
  c.exportable = exportable ? 1 : 0;
  vpmm_pool* p = nullptr;
  vpmm_status st = vpmm_pool_create(&c, &p);
  if (st != VPMM_OK)
    std::printf("  vpmm_pool_create(exportable=%d): %s: %s\n", exportable, vpmm_status_string(st), vpmm_last_error());
  return st == VPMM_OK ? p : nullptr;
}

inline void fill_words(void* p, uint64_t bytes, uint64_t seed) {
  fill_kernel<<<1024, 256>>>(static_cast<uint64_t*>(p), bytes / 8, seed);
}

// Words of [p, p+bytes) that are not pattern(seed); UINT64_MAX if the check failed.
inline uint64_t bad_words(const void* p, uint64_t bytes, uint64_t seed) {
  unsigned long long* bad = nullptr;
  if (cudaMallocManaged(&bad, sizeof *bad) != cudaSuccess) return UINT64_MAX;
  *bad = 0;
  verify_kernel<<<1024, 256>>>(static_cast<const uint64_t*>(p), bytes / 8, seed, bad);
  uint64_t n = cudaDeviceSynchronize() == cudaSuccess ? *bad : UINT64_MAX;
  cudaFree(bad);
  return n;
}

// Commands (vt::Cmd): I import what follows on the socket -> (status, index);
// V verify import a with seed b -> (bad words, size); W fill import a with
// seed b; S state of import a -> (status, state); C close import a; U copy
// import a into a local buffer, verify seed b if non-zero -> (0 or error,
// copy ns); Q destroy the pool and exit.
inline int rollout_main(int sock) {
  if (cudaSetDevice(0) != cudaSuccess) return 3;
  vpmm_pool* pool = ipc_cuda_pool(false);
  if (!pool) return 2;
  std::vector<vpmm_import*> imports;
  void* local = nullptr;  // the rollout's own copy of the weights
  uint64_t local_size = 0;
  for (;;) {
    vt::Cmd c;
    if (!vt::read_all(sock, &c, sizeof c)) return 0;
    int64_t r0 = 0, r1 = 0;
    auto entry = [&](int64_t i) {
      vpmm_ipc_entry e;
      std::memset(&e, 0, sizeof e);
      e.struct_size = sizeof e;
      vpmm_import_entry(imports.at(i), 0, &e);
      return e;
    };
    switch (c.op) {
      case 'I': {
        size_t size = 0, n = 0;
        r0 = vpmm_ipc_recv(sock, nullptr, 0, &size, nullptr, 0, &n);
        std::string d(size, '\0');
        std::vector<int> fds(n);
        if (r0 == VPMM_OK) r0 = vpmm_ipc_recv(sock, &d[0], size, &size, fds.data(), n, &n);
        vpmm_import* imp = nullptr;
        if (r0 == VPMM_OK) r0 = vpmm_pool_import(pool, d.data(), d.size(), fds.data(), fds.size(), &imp);
        if (r0 != VPMM_OK) std::printf("  rollout: %s\n", vpmm_last_error());
        for (int fd : fds) close(fd);
        if (r0 == VPMM_OK) {
          imports.push_back(imp);
          r1 = static_cast<int64_t>(imports.size() - 1);
        }
        break;
      }
      case 'V': {
        vpmm_ipc_entry e = entry(c.a);
        r0 = static_cast<int64_t>(bad_words(e.ptr, e.size, static_cast<uint64_t>(c.b)));
        r1 = static_cast<int64_t>(e.size);
        break;
      }
      case 'W': {
        vpmm_ipc_entry e = entry(c.a);
        fill_words(e.ptr, e.size, static_cast<uint64_t>(c.b));
        r0 = cudaDeviceSynchronize();
        break;
      }
      case 'S': {
        int32_t s = 0;
        r0 = vpmm_import_state(imports.at(c.a), &s);
        r1 = s;
        break;
      }
      case 'C':
        cudaDeviceSynchronize();
        r0 = vpmm_import_close(pool, imports.at(c.a));
        break;
      case 'U': {
        vpmm_ipc_entry e = entry(c.a);
        if (local_size < e.size) {
          if (local) cudaFree(local);
          local = nullptr;
          local_size = 0;
          if (cudaMalloc(&local, e.size) != cudaSuccess) {
            r0 = -1;
            break;
          }
          local_size = e.size;
        }
        auto t0 = std::chrono::steady_clock::now();
        cudaMemcpyAsync(local, e.ptr, e.size, cudaMemcpyDeviceToDevice, nullptr);
        r0 = cudaStreamSynchronize(nullptr);
        r1 = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
        if (r0 == 0 && c.b != 0) r0 = bad_words(local, e.size, static_cast<uint64_t>(c.b)) == 0 ? 0 : -2;
        break;
      }
      case 'Q':
        if (local) cudaFree(local);
        vpmm_pool_destroy(pool);
        vt::write_all(sock, &r0, sizeof r0);
        vt::write_all(sock, &r1, sizeof r1);
        _exit(0);
      default:
        r0 = -1;
    }
    int64_t r[2] = {r0, r1};
    if (!vt::write_all(sock, r, sizeof r)) return 0;
  }
}

// The trainer's side of 'I': sends the export, returns the rollout's status.
inline vpmm_status send_to(vt::Child& ch, const vpmm_export* ex, int64_t* index) {
  if (!ch.send('I')) return VPMM_ERR_INTERNAL;
  vpmm_status st = vpmm_export_send(ex, ch.sock);
  if (st != VPMM_OK) return st;
  int64_t r0 = -1, r1 = -1;
  ch.answer(&r0, &r1);
  *index = r1;
  return static_cast<vpmm_status>(r0);
}

}  // namespace gt
