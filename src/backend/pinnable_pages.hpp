// Host memory for the GPU backends' pinned backup buffers, made ready to be
// registered with the driver (cuMemHostRegister, hipHostRegister).
//
// Why populated here: pinning fresh anonymous memory spends most of its time
// faulting and zeroing the pages inside the driver's registration call, and
// that call holds the driver's lock, so every other thread's launches and
// copies wait for it (measured on an H100: a background pinning of 16 GiB
// stalled the training thread for its whole 2.7 s). Faulting the pages in
// first, on several threads and without any driver lock, leaves the
// registration only the pinning itself.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace vpmm {

// mmap'd anonymous memory of `size` bytes rounded up to 2 MiB (*mapped),
// advised huge pages, kept out of fork()ed children (MADV_DONTFORK: no
// copy-on-write under a DMA), every page faulted in. nullptr when the
// mapping, the fork advice or the faulting fails (out of memory).
void* map_pinnable(uint64_t size, uint64_t* mapped);
void unmap_pinnable(void* p, uint64_t mapped);

// The buffers a backend pinned by registering map_pinnable() memory with its
// driver, and how long each mapping is. Thread safe.
class PinnedPages {
 public:
  // map_pinnable(size) registered by reg(p, mapped) (true on success). On any
  // failure nothing stays mapped or registered and the result is nullptr: the
  // caller falls back to the driver's own pinned allocation.
  template <typename Register, typename Unregister>
  void* pin(uint64_t size, Register reg, Unregister unreg) {
    uint64_t mapped = 0;
    void* p = map_pinnable(size, &mapped);
    if (p == nullptr) return nullptr;
    if (!reg(p, mapped)) {
      unmap_pinnable(p, mapped);
      return nullptr;
    }
    try {
      std::lock_guard<std::mutex> lk(mu_);
      mapped_.emplace(p, mapped);
    } catch (...) {
      unreg(p);
      unmap_pinnable(p, mapped);
      return nullptr;
    }
    return p;
  }
  // The mapped length of a buffer pin() gave; 0 for any other pointer.
  uint64_t mapped_length(void* p) const {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = mapped_.find(p);
    return it == mapped_.end() ? 0 : it->second;
  }
  // Once the driver unregistered it: unmaps the buffer and forgets it.
  void release(void* p) {
    uint64_t mapped = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = mapped_.find(p);
      if (it == mapped_.end()) return;
      mapped = it->second;
      mapped_.erase(it);
    }
    unmap_pinnable(p, mapped);
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<void*, uint64_t> mapped_;
};

}  // namespace vpmm
