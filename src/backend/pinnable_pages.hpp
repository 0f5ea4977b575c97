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

namespace vpmm {

// mmap'd anonymous memory of `size` bytes rounded up to 2 MiB (*mapped),
// advised huge pages, kept out of fork()ed children (MADV_DONTFORK: no
// copy-on-write under a DMA), every page faulted in. nullptr when the
// mapping, the fork advice or the faulting fails (out of memory).
void* map_pinnable(uint64_t size, uint64_t* mapped);
void unmap_pinnable(void* p, uint64_t mapped);

}  // namespace vpmm
