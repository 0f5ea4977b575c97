/*
 * libvpmm: the framework hooks: the process-wide default pools and the
 * PyTorch and CuPy allocator entry points over them.
 *
 * Part of the public header: vpmm.h includes it at its end, so a program
 * includes vpmm.h and never needs to name this file; including it first
 * works too (it includes vpmm.h). Kept apart because these functions serve
 * frameworks that load the library by name (CUDAPluggableAllocator,
 * CFunctionAllocator), not programs that hold a pool of their own. Moving
 * them here changed no declaration or symbol. The conventions of vpmm.h
 * hold; plain C99.
 */
#ifndef VPMM_HOOKS_H
#define VPMM_HOOKS_H

#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Hooks: default pools, PyTorch and CuPy allocators                        */
/* ------------------------------------------------------------------------ */
/* The large_rounding of the default pools (below) unless VPMM_LARGE_ROUNDING
 * is set: PyTorch's block rounding. Framework tensors need no page
 * alignment, and on a recorded inference trace whole pages held 5% more
 * than the tensors. */
#define VPMM_DEFAULT_POOL_LARGE_ROUNDING 512

/* The process-wide pool of `device`, created on first use from
 * vpmm_config_init() (VPMM_* environment applies) and never destroyed, for
 * hooks that carry no user data. Unlike a pool of vpmm_config_init(), its
 * large_rounding is 512 bytes unless VPMM_LARGE_ROUNDING is set: framework
 * tensors share pages, as in PyTorch's own allocator (tagged memory still
 * owns whole pages). The pool is owned by the library: never pass it to
 * vpmm_pool_destroy.
 * Errors: INVALID_ARGUMENT (null out, device outside 0..63), those of
 * vpmm_pool_create. Thread safe. */
VPMM_API vpmm_status vpmm_default_pool(int32_t device, vpmm_pool** out);

/* PyTorch CUDAPluggableAllocator entry points over the default pools:
 *   torch.cuda.memory.CUDAPluggableAllocator("libvpmm.so", "vpmm_torch_malloc", "vpmm_torch_free")
 * malloc allocates on `stream` in the pool of `device`; it returns NULL on
 * failure (size <= 0 included; PyTorch then raises OutOfMemoryError); the
 * reason is in vpmm_last_error() and, as VPMM_LOG allows, on stderr.
 * Allocations made inside a tag scope (vpmm_tag_scope_push) are tagged
 * (pausable). free ignores `size` and a NULL ptr; a pointer the pool refuses
 * is reported on stderr as VPMM_LOG allows. Thread safe. */
VPMM_API void* vpmm_torch_malloc(ptrdiff_t size, int device, void* stream);
VPMM_API void vpmm_torch_free(void* ptr, ptrdiff_t size, int device, void* stream);

/* PyTorch's Tensor.record_stream for the hooks above: `stream` uses the
 * allocation at `ptr` (as vpmm_torch_malloc returned it) besides the stream
 * it was allocated on. Given to PyTorch with the pluggable allocator's
 * set_record_stream_fn (vpmm.torch does; without it PyTorch drops
 * record_stream, and memory used on another stream could be handed out
 * again on its own stream while that stream's kernels still read it).
 * vpmm_torch_free of `ptr` then frees on the last stream recorded, t, not
 * on the allocating stream: the pool reuses the memory on t in t's order
 * and on other streams only once t's work queued before the free has
 * completed, and at the free t waits on the GPU for all work queued so far
 * on the allocating stream (the tensor's own kernels included) and on every
 * other recorded stream (one event each, counted in n_stream_waits; the CPU
 * does not wait; should a wait fail, the CPU synchronizes that stream). A
 * recorded stream the backend no longer knows (destroyed meanwhile) is
 * skipped; if it is t, the free goes to the allocating stream, after the
 * others, so nothing leaks.
 * Recording on the allocating stream itself, or again on a stream already
 * recorded, changes nothing; a NULL ptr is ignored. The record lasts until
 * the free (or a new allocation at the same address).
 * Thread safe. */
VPMM_API void vpmm_torch_record_stream(void* ptr, void* stream);

/* CuPy cupy.cuda.memory.CFunctionAllocator entry points over the default
 * pools (vpmm_default_pool(device)):
 *   CFunctionAllocator(param, vpmm_cupy_malloc, vpmm_cupy_free, owner)
 * `param` is NULL, or a const vpmm_alloc_attrs* the caller keeps alive (and
 * unchanged) as long as the allocator is used: NULL means the calling
 * thread's tag scope (vpmm_tag_scope_push; or untagged), like the PyTorch
 * hooks; an attrs pointer fixes the tag and flags of every allocation made
 * through it.
 * CuPy passes no stream: memory is allocated and freed in the order of the
 * backend's default stream (NULL), which on CUDA is the legacy default stream
 * and so is ordered after the work of CuPy's blocking streams. malloc returns
 * NULL on failure (size 0 included; the reason is in vpmm_last_error() and,
 * as VPMM_LOG allows, on stderr); CuPy itself does not turn NULL into an
 * error, so wrap it (vpmm.cupy does). free of NULL or of a pointer the pool
 * does not know is reported on stderr and otherwise ignored. Thread safe. */
VPMM_API void* vpmm_cupy_malloc(void* param, size_t size, int device);
VPMM_API void vpmm_cupy_free(void* param, void* ptr, int device);

#ifdef __cplusplus
}
#endif
#endif /* VPMM_HOOKS_H */
