#pragma once

// The arithmetic of tensors and blobs on host memory: the host path of blob
// operations, and the body of the host functions that emulated devices run
// in stream order (src/backend/emulated/emulated_kernels.cpp).

#include <cstddef>
#include <cstdint>

#include "backend/kernels.hpp"
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

// x[i] = start + i (int32, int64, float32 or float64).
void iota(dtype type, void* x, std::size_t n, std::int64_t start) noexcept;
// The public checksum (elementwise.hpp): the sum, modulo 2^64, of
// checksum_term(w, k) over the little-endian 8-byte words w of the bytes
// (the last one padded with zeros), k their index. A sum, so that a GPU may
// add the terms in any order; each term mixes the word with its position.
[[nodiscard]] std::uint64_t checksum(const void* p, std::size_t bytes) noexcept;

// splitmix64's finaliser of w + (k + 1) × the golden ratio. Also compiled
// for the GPU (src/backend/cuda/tensor_kernels.cu), so that both agree by construction.
#if defined(__CUDACC__)
__host__ __device__
#endif
    [[nodiscard]] constexpr std::uint64_t
    checksum_term(std::uint64_t w, std::uint64_t k) noexcept {
  std::uint64_t z = w + (k + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace syncmem::detail::host_math
