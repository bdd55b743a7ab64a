#include "backend/cuda_stream_handles.hpp"

#include <cstdint>

namespace syncmem::detail {

// The value of cudaStreamPerThread in the CUDA ABI: without CUDA in this build,
// such a handle can still arrive from elsewhere and must not be taken for one stream.
CUstream_st* cuda_per_thread_stream() noexcept {
  return reinterpret_cast<CUstream_st*>(std::uintptr_t{2});  // NOLINT(performance-no-int-to-ptr)
}

}  // namespace syncmem::detail
