#include "backend/backend.hpp"

namespace syncmem::detail {

backend& backend_for(device_kind kind) noexcept {
  return kind == device_kind::cuda ? cuda_backend() : emulated_backend();
}

}  // namespace syncmem::detail
