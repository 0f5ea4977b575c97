/* Control interface of the emulated HIP runtime (tests/hip_emu/): a test-only
 * shared library that exports the hip* functions the HIP backend loads, over
 * memfd + mmap, and reproduces documented ROCm behaviour (docs/backends.md,
 * shared notes on ROCm VMM). Load it with VPMM_HIP_LIBRARY=<path>.
 *
 * Behaviours (each also an environment variable VPMM_HIP_EMU_<NAME>, read
 * when the library is loaded; hip_emu_set changes them later):
 *   VERSION            hipRuntimeGetVersion value (HIP_VERSION encoding), default
 *                      60241134 (ROCm 6.2). >= 60000000 = the ROCm 6 layout of
 *                      hipMemAllocationProp is expected, else the 5.x layout.
 *   DEVICES            hipGetDeviceCount (default 1; 0 = hipErrorNoDevice)
 *   VMM_ATTR           hipDeviceAttributeVirtualMemoryManagementSupported (default 1)
 *   GRANULARITY        reported granularity, minimum and recommended (default 4096)
 *   MAX_CREATE         largest hipMemCreate size; larger fails with
 *                      hipErrorOutOfMemory (default 0 = none)
 *   CAPACITY           device bytes (default 1 GiB): hipMemCreate beyond it fails
 *                      with hipErrorOutOfMemory; hipMemGetInfo reports it
 *   STRICT_CHUNKS      1 (default): hipMemSetAccess / hipMemUnmap over more than one
 *                      mapping fail with hipErrorInvalidValue (ROCR-Runtime#285,
 *                      rocm-systems#2516); 0: accepted when they cover whole mappings
 *   HOLD_UNTIL_VA_FREE 1: ROCm 7.2 (TMS#83): an unmapped handle's memory stays
 *                      allocated, even after hipMemRelease, until the VA range it
 *                      was mapped at is freed with hipMemAddressFree (default 0)
 *   RESERVE_NULL       1: hipMemAddressReserve returns hipSuccess with NULL (ROCm 6.0)
 *   ALIGN_FAIL         1: hipMemAddressReserve with a non-zero alignment fails with
 *                      hipErrorOutOfMemory (vLLM#43022); alignment 0 works
 *   NO_HOST_REGISTER   1: hipHostRegister fails with hipErrorNotSupported
 *
 * Always: a copy spanning two reservations fails with hipErrorInvalidValue
 * (intel/llvm#22671), and freed VA stays the runtime's (reused only by a
 * reservation that asks for that address, as a GPU's VA is not the process's).
 *
 * Call discipline: a call that breaks the rules the backend must keep
 * (unmapping a range that is not exactly mapped pieces, releasing a mapped
 * handle, mapping over a mapping or outside a reservation, freeing VA with
 * live mappings, unknown handles, events or host buffers) prints
 * "hip_emu: DISCIPLINE: ..." on stderr and aborts.
 *
 * Streams and events are synchronous (complete at once) unless a test plugs
 * in stream operations with hip_emu_set_stream_ops: then hipStream_t values
 * are those operations' streams (the host streams of libvpmm's tests), so the
 * pool tests that hold streams run unchanged over HIP. */
#ifndef VPMM_HIP_EMU_H
#define VPMM_HIP_EMU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hip_emu_stream_ops {
  /* Each returns 0 on success. Streams are void*, NULL = the default stream. */
  int (*stream_create)(void** out);
  int (*stream_destroy)(void* s);
  int (*stream_synchronize)(void* s);
  int (*event_record)(void* s, uint64_t* out);
  int (*event_query)(uint64_t e, int* done);
  int (*event_destroy)(uint64_t e);
  int (*event_sync)(uint64_t e);
  int (*stream_wait_event)(void* s, uint64_t e);
  /* Run fn(user) in stream order (at once when nothing is pending). */
  int (*submit)(void* s, void (*fn)(void*), void* user);
} hip_emu_stream_ops;

/* Plug in (ops != NULL) or remove the stream operations. Not while streams or
 * events of the previous setting are alive. */
void hip_emu_set_stream_ops(const hip_emu_stream_ops* ops);

/* Change behaviour NAME (as above, without the prefix, e.g. "CAPACITY").
 * Returns 0, or -1 for an unknown name. */
int hip_emu_set(const char* name, uint64_t value);

/* Read a behaviour or a counter: "USED" (device bytes held), "HANDLES",
 * "MAPPINGS", "RESERVATIONS", "HELD_BY_VA" (bytes kept only by the 7.2
 * behaviour), "CREATES", "MAPS", "SET_ACCESS", "UNMAPS", "ADDRESS_FREES",
 * "ADDRESS_RESERVES", "MAX_SET_ACCESS_SPAN" (most mappings one
 * hipMemSetAccess covered). UINT64_MAX for an unknown name. */
uint64_t hip_emu_get(const char* name);

/* Zero the call counters. */
void hip_emu_reset_counters(void);

#ifdef __cplusplus
}
#endif
#endif /* VPMM_HIP_EMU_H */
