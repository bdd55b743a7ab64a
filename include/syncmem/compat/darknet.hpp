#pragma once

/// @file compat/darknet.hpp
/// @brief darknet's `cuda_make_array`, `cuda_push_array`, `cuda_pull_array`
/// and friends on syncmem.
///
/// Port by changing the include and the namespace (`syncmem::compat::darknet`).
/// They work on the current device of the compat kind (compat/device.hpp) and
/// on the library's stream for it: syncmem::default_stream(device), which is
/// the legacy default stream on CUDA, so darknet kernels launched without a
/// stream stay ordered with these copies.
///
/// Differences from the original, each a fix:
/// - Memory comes from the device's caching allocator, not cudaMalloc.
/// - Out of memory throws syncmem::out_of_memory stating what was asked, on
///   which device, and how memory stood; the original printed "Try to set
///   subdivisions=64 in your cfg-file." whatever the cause, then exited.
/// - cuda_make_array(nullptr, n) returns zeros (the original left it unset).
/// - Sizes are size_t and checked for overflow; a null pointer with n > 0 and a
///   pointer cuda_make_array did not return are errors, not crashes.
/// - cuda_push_array and cuda_pull_array return once the copy is complete, so
///   the host array may be reused at once (the original's push was asynchronous
///   on pageable memory only in name).

#include <cstddef>

#include "syncmem/stream.hpp"

namespace syncmem::compat::darknet {

/// @brief Device memory for `n` floats, holding x[0..n) or zeros when x is null.
float* cuda_make_array(float* x, size_t n);
/// @brief Device memory for `n` ints, holding x[0..n) or zeros when x is null.
int* cuda_make_int_array(int* x, size_t n);
/// @brief Copies n floats from host x to device x_gpu.
void cuda_push_array(float* x_gpu, float* x, size_t n);
/// @brief Copies n floats from device x_gpu to host x.
void cuda_pull_array(float* x_gpu, float* x, size_t n);
/// @brief Frees memory from cuda_make_array or cuda_make_int_array (null: nothing).
void cuda_free(float* x_gpu);
void cuda_free(int* x_gpu);
/// @brief The stream the functions above use on the current device.
[[nodiscard]] stream_view get_cuda_stream();

}  // namespace syncmem::compat::darknet
