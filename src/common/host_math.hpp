#pragma once

// The arithmetic of tensors and blobs on host memory: the host path of blob
// operations, and the body of the host functions that emulated devices run
// in stream order (src/emulated/emulated_kernels.cpp).

#include <cstddef>
#include <cstdint>

#include "kernels.hpp"
#include "syncmem/dtype.hpp"

namespace syncmem::detail::host_math {

// p[i] = the low `itemsize` bytes of `bits` for i < count.
void fill(void* p, std::size_t count, std::size_t itemsize, std::uint64_t bits) noexcept;
// x[i] *= alpha (float32 or float64).
void scale(dtype type, void* x, std::size_t n, double alpha) noexcept;
// y[i] += alpha * x[i] (float32 or float64).
void axpy(dtype type, std::size_t n, double alpha, const void* x, void* y) noexcept;
// Sum of |x| or of x * x over x[0, n) (float32 or float64), accumulated in
// double with Neumaier's compensation: the error does not grow with n.
[[nodiscard]] double reduce(dtype type, reduction r, const void* x, std::size_t n) noexcept;

}  // namespace syncmem::detail::host_math
