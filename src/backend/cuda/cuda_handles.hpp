#pragma once

// The CUDA runtime's stream and event handles as the backend interface passes
// them (stream_handle, event_handle), and back: the conversions are the public
// ones of syncmem/cuda/interop.hpp.

#include "backend/handles.hpp"
#include "syncmem/cuda/interop.hpp"

namespace syncmem::detail::cuda {

using ::syncmem::cuda::handle_of;
using ::syncmem::cuda::native;

}  // namespace syncmem::detail::cuda
