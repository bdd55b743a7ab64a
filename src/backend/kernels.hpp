#pragma once

// Element-wise work and reductions on device memory, in stream order, for
// tensors and blobs. One implementation per device kind: CUDA kernels
// (src/backend/cuda/tensor_kernels.cu), and for emulated devices host functions
// enqueued on the stream (src/backend/emulated/emulated_kernels.cpp), so that work on
// emulated devices goes through the same stream ordering as on a GPU. A build
// without CUDA has a CUDA implementation that refuses everything
// (src/backend/none/no_cuda_kernels.cpp). No CUDA header here: the layers above see only
// this interface.
//
// Callers hold a device_guard for the stream's device; pointers are device
// memory of that device, aligned for their element type.

#include <cstddef>
#include <cstdint>

#include "backend/per_kind.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/dtype.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::detail {

enum class reduction : std::uint8_t {
  asum,   // sum of |x|
  sumsq,  // sum of x * x
};

class device_kernels {
 public:
  device_kernels() = default;
  device_kernels(const device_kernels&) = delete;
  device_kernels& operator=(const device_kernels&) = delete;
  virtual ~device_kernels() = default;

  // p[i] = the low `itemsize` bytes of `bits` for i < count; itemsize is 1, 2, 4 or 8.
  virtual void fill(stream_view s, void* p, std::size_t count, std::size_t itemsize, std::uint64_t bits) = 0;
  // x[i] *= alpha, for float32 and float64.
  virtual void scale(stream_view s, dtype type, void* x, std::size_t n, double alpha) = 0;
  // y[i] += alpha * x[i], for float32 and float64.
  virtual void axpy(stream_view s, dtype type, std::size_t n, double alpha, const void* x, void* y) = 0;
  // x[i] = start + i, for int32, int64, float32 and float64.
  virtual void iota(stream_view s, dtype type, void* x, std::size_t n, std::int64_t start) = 0;
  // Once `s` reaches this point, the first 8 bytes of `scratch` (device
  // memory) hold host_math::checksum(p, bytes).
  virtual void checksum(stream_view s, const void* p, std::size_t bytes, void* scratch) = 0;
  // Bytes of device memory reduce() needs for n elements.
  [[nodiscard]] virtual std::size_t reduce_scratch_bytes(std::size_t n) = 0;
  // Reduces x[0, n) (n > 0; float32 or float64) in double precision: once `s`
  // reaches this point, the first double of `scratch` holds the result.
  virtual void reduce(stream_view s, dtype type, reduction r, const void* x, std::size_t n, void* scratch) = 0;
};

[[nodiscard]] device_kernels& cuda_kernels() noexcept;
[[nodiscard]] device_kernels& emulated_kernels() noexcept;
[[nodiscard]] inline device_kernels& kernels_for(device_kind kind) noexcept {
  static_assert(device_kind_count == 2, "a new device kind needs its kernels here");
  static constexpr per_kind<device_kernels& (*)() noexcept> table{{{&cuda_kernels, &emulated_kernels}}};
  return table[kind]();
}

}  // namespace syncmem::detail
