// The CUDA backend entry points when libvpmm is built without cuda.h: the
// factory reports VPMM_ERR_UNSUPPORTED and BACKEND_AUTO never picks CUDA.
// Nothing here touches the driver.
#include <memory>

#include "backend/backend.hpp"
#include "core/error.hpp"

namespace vpmm {

bool cuda_backend_usable() { return false; }

std::unique_ptr<Backend> make_cuda_backend(const BackendParams& p, vpmm_status* st) {
  vpmm_status s = fail(VPMM_ERR_UNSUPPORTED,
                       "libvpmm was built without the CUDA backend (cuda.h was not found at build "
                       "time; device %d requested)",
                       p.device);
  if (st != nullptr) *st = s;
  return nullptr;
}

}  // namespace vpmm
