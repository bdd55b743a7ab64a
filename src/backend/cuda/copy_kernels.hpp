#pragma once

// The copy kernel of batched copies (backend::copy_kernel_batch, CUDA).

#include <cuda_runtime_api.h>

#include <cstddef>

namespace syncmem::detail {

// Enqueues copies of sizes[i] bytes from srcs[i] to dsts[i] on `s`, a launch
// per few hundred copies, with the preconditions of
// backend::copy_kernel_batch: every pointer addressable by the current
// device, each size below 4 GiB, dsts[i] and srcs[i] at the same offset
// modulo 16.
// @throws syncmem::cuda_error when a launch fails (the launches before it stay enqueued)
void launch_copy_kernels(void* const* dsts, const void* const* srcs, const std::size_t* sizes, std::size_t count,
                         cudaStream_t s);

}  // namespace syncmem::detail
