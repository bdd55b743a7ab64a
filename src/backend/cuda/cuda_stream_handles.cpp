#include "backend/cuda_stream_handles.hpp"

#include "backend/cuda/cuda_handles.hpp"

namespace syncmem::detail {

stream_handle cuda_per_thread_stream() noexcept { return cuda::handle_of(cudaStreamPerThread); }

}  // namespace syncmem::detail
