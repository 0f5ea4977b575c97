// Probe (not part of the build): how should the mmap and disk backup stores
// move their bytes? 4 GiB between the device and
//  - pinned memory (the ceiling);
//  - fresh anonymous pageable memory, copied by the driver (its own
//    staging), with 4 KiB and huge-page-advised pages; then again into the
//    same, now faulted, memory; and H2D back;
//  - the same memory through 4 pinned slots of 64 MiB: the copy engine
//    fills one slot while the CPU copies the one before on 1, 4 or 8
//    threads (the reverse for H2D);
//  - a file in each directory, through the same slots: pwrite/pread of
//    64 MiB, O_DIRECT and buffered, overlapped with the copies.
//   nvcc -O2 -std=c++17 bench/probes/backup_store_probe.cu -o /tmp/bsp && /tmp/bsp [DIR...]
// On an H200 (driver 580, 16 cores, ext4 on a virtual disk), GB/s:
//   pinned                               55.4 D2H  55.5 H2D
//   pageable, 4 KiB pages                 1.6 D2H fresh, 16.2 warm   9.1 H2D
//   pageable, huge pages                  4.1 D2H fresh, 17.8 warm   9.1 H2D
//   staged, 4 KiB pages, 1/4/8 threads    1.8 /  5.5 /  9.7 D2H   6.4 / 20.4 / 28.4 H2D
//   staged, huge pages, 1/4/8 threads     3.4 / 11.5 / 17.3 D2H   6.3 / 19.4 / 29.5 H2D
//   file /root (ext4), O_DIRECT           2.37 pause   1.96 resume
//   file /root (ext4), buffered           1.40 pause   1.79 resume
//   file /dev/shm (tmpfs)                 4.47 pause   3.94 resume (one thread's memcpy)
// Hence the mmap store: huge-page advised, staged, the host side on 8
// threads; the disk store: direct I/O where the file system takes it.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t GiB = 1ull << 30, N = 4 * GiB, kSlot = 64ull << 20;
constexpr int kSlots = 4;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double gbps(double t0, double t1) { return N / (t1 - t0) / 1e9; }

char* anon(bool huge) {
  void* p = mmap(nullptr, N, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (huge) madvise(p, N, MADV_HUGEPAGE);
  return static_cast<char*>(p);
}

void par_copy(char* dst, const char* src, uint64_t n, int threads) {
  std::vector<std::thread> ts;
  const uint64_t per = n / threads;
  for (int i = 0; i < threads; ++i)
    ts.emplace_back([=] { std::memcpy(dst + i * per, src + i * per, per); });
  for (auto& t : ts) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  char* dev = nullptr;
  cudaMalloc(&dev, N);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  char* pinned = nullptr;
  cudaMallocHost(&pinned, N);
  double t0 = now_s();
  cudaMemcpyAsync(pinned, dev, N, cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  double t1 = now_s();
  cudaMemcpyAsync(dev, pinned, N, cudaMemcpyHostToDevice, s);
  cudaStreamSynchronize(s);
  std::printf("pinned %.1f D2H %.1f H2D\n", gbps(t0, t1), gbps(t1, now_s()));

  for (bool huge : {false, true}) {
    char* h = anon(huge);
    t0 = now_s();
    cudaMemcpyAsync(h, dev, N, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    t1 = now_s();
    cudaMemcpyAsync(h, dev, N, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    double t2 = now_s();
    cudaMemcpyAsync(dev, h, N, cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
    std::printf("pageable huge=%d D2H fresh %.1f warm %.1f, H2D %.1f\n", huge, gbps(t0, t1), gbps(t1, t2),
                gbps(t2, now_s()));
    munmap(h, N);
  }

  char* slots = pinned;  // the first kSlots x kSlot bytes of the pinned buffer
  cudaEvent_t ev[kSlots];
  for (auto& e : ev) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  const uint64_t chunks = N / kSlot;
  auto d2h_staged = [&](auto&& sink) {  // copy engine -> slot -> sink(chunk, slot)
    uint64_t q = 0;
    for (uint64_t c = 0; c < chunks; ++c) {
      for (; q < chunks && q < c + kSlots; ++q) {
        cudaMemcpyAsync(slots + (q % kSlots) * kSlot, dev + q * kSlot, kSlot, cudaMemcpyDeviceToHost, s);
        cudaEventRecord(ev[q % kSlots], s);
      }
      cudaEventSynchronize(ev[c % kSlots]);
      sink(c, slots + (c % kSlots) * kSlot);
    }
  };
  auto h2d_staged = [&](auto&& source) {  // source(chunk, slot) -> slot -> copy engine
    for (uint64_t c = 0; c < chunks; ++c) {
      if (c >= kSlots) cudaEventSynchronize(ev[c % kSlots]);
      source(c, slots + (c % kSlots) * kSlot);
      cudaMemcpyAsync(dev + c * kSlot, slots + (c % kSlots) * kSlot, kSlot, cudaMemcpyHostToDevice, s);
      cudaEventRecord(ev[c % kSlots], s);
    }
    cudaStreamSynchronize(s);
  };
  for (bool huge : {false, true})
    for (int threads : {1, 4, 8}) {
      char* h = anon(huge);
      t0 = now_s();
      d2h_staged([&](uint64_t c, char* slot) { par_copy(h + c * kSlot, slot, kSlot, threads); });
      t1 = now_s();
      h2d_staged([&](uint64_t c, char* slot) { par_copy(slot, h + c * kSlot, kSlot, threads); });
      std::printf("staged huge=%d threads=%d D2H %.1f H2D %.1f\n", huge, threads, gbps(t0, t1),
                  gbps(t1, now_s()));
      munmap(h, N);
    }

  for (int a = 1; a < argc; ++a)
    for (int flags : {O_DIRECT, 0}) {
      const std::string path = std::string(argv[a]) + "/vpmm-probe-file";
      int fd = open(path.c_str(), O_RDWR | O_CREAT | flags, 0600);
      if (fd < 0) {
        std::printf("file %s direct=%d: cannot open\n", argv[a], flags != 0);
        continue;
      }
      posix_fallocate(fd, 0, N);
      bool ok = true;
      t0 = now_s();
      d2h_staged([&](uint64_t c, char* slot) { ok &= pwrite(fd, slot, kSlot, c * kSlot) == (ssize_t)kSlot; });
      fdatasync(fd);
      t1 = now_s();
      posix_fadvise(fd, 0, N, POSIX_FADV_DONTNEED);
      double t2 = now_s();
      h2d_staged([&](uint64_t c, char* slot) { ok &= pread(fd, slot, kSlot, c * kSlot) == (ssize_t)kSlot; });
      std::printf("file %s direct=%d pause %.2f resume %.2f%s\n", argv[a], flags != 0, gbps(t0, t1),
                  gbps(t2, now_s()), ok ? "" : " (I/O error)");
      close(fd);
      unlink(path.c_str());
    }
  return 0;
}
