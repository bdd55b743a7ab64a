#pragma once

// The reductions of the emulated collectives, element by element as NCCL
// computes them: integers wrap, 16-bit floats round after each step.

#include <cstddef>

#include "syncmem/dtype.hpp"
#include "syncmem/nccl/communicator.hpp"

namespace syncmem::nccl::detail {

// acc[i] = op(acc[i], in[i]) for i < count (avg adds; see divide).
void host_reduce(dtype type, reduce_op op, void* acc, const void* in, std::size_t count);
// acc[i] /= ranks: the end of an avg.
void host_divide(dtype type, void* acc, std::size_t count, int ranks);

}  // namespace syncmem::nccl::detail
