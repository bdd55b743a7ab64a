#include "backend/cuda_stream_handles.hpp"

#include <cstdint>

namespace syncmem::detail {

// The value of cudaStreamPerThread in the CUDA ABI: without CUDA in this build,
// such a handle can still arrive from elsewhere and must not be taken for one stream.
stream_handle cuda_per_thread_stream() noexcept { return stream_handle{2}; }

}  // namespace syncmem::detail
