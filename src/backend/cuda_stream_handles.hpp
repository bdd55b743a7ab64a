#pragma once

// The CUDA runtime's special stream handles, for backend-neutral code that must
// recognize them among the handles it is given without including the CUDA
// headers. Defined by src/backend/cuda, or by src/backend/none without CUDA.

#include "syncmem/stream.hpp"

namespace syncmem::detail {

// cudaStreamPerThread: one handle that names a different stream on every
// thread (the per-thread default stream of whichever device is current).
[[nodiscard]] stream_handle cuda_per_thread_stream() noexcept;

}  // namespace syncmem::detail
