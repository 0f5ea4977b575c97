// Backend selection: VPMM_BACKEND_AUTO means the CUDA driver when it loads and
// sees a device, else the host backend. HIP is not built yet.
#include "backend/backend.hpp"
#include "core/error.hpp"

namespace vpmm {

std::unique_ptr<Backend> make_backend(int32_t kind, const BackendParams& p, vpmm_status* st) {
  switch (kind) {
    case VPMM_BACKEND_AUTO:
      if (cuda_backend_usable()) return make_cuda_backend(p, st);
      return make_host_backend(p, st);
    case VPMM_BACKEND_CUDA:
      return make_cuda_backend(p, st);
    case VPMM_BACKEND_HOST:
      return make_host_backend(p, st);
    case VPMM_BACKEND_HIP:
      *st = fail(VPMM_ERR_UNSUPPORTED, "vpmm_pool_create: libvpmm was built without the HIP backend");
      return nullptr;
    default:
      *st = fail(VPMM_ERR_INVALID_ARGUMENT, "vpmm_pool_create: backend %d is not a VPMM_BACKEND_* value", kind);
      return nullptr;
  }
}

}  // namespace vpmm
