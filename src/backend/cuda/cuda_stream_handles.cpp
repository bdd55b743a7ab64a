#include "backend/cuda_stream_handles.hpp"

#include <cuda_runtime_api.h>

namespace syncmem::detail {

CUstream_st* cuda_per_thread_stream() noexcept { return cudaStreamPerThread; }

}  // namespace syncmem::detail
