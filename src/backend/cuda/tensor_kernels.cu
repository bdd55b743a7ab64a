// CUDA kernels for tensors and blobs (the interface is src/backend/kernels.hpp).
//
// Element-wise kernels use grid-stride loops over std::size_t indices, so any
// count works with a bounded grid. Reductions are two passes: each thread
// accumulates in double over its grid-stride share, each block adds its
// threads' sums as a tree in shared memory and writes one partial; then one
// block adds the partials the same way. The grid depends only on n, so a
// result is reproducible run to run.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/host_math.hpp"
#include "backend/kernels.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail {
namespace {

constexpr unsigned block_threads = 256;  // a power of two: the tree halves it
constexpr unsigned max_blocks = 1024;    // also the most partials a reduction has

unsigned blocks_for(std::size_t n) {
  const std::size_t blocks = (n + block_threads - 1) / block_threads;
  if (blocks == 0) return 1;
  return static_cast<unsigned>(blocks < max_blocks ? blocks : max_blocks);
}

cudaStream_t native(stream_view s) noexcept { return s.native_handle(); }

__device__ std::size_t first_index() { return blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; }
__device__ std::size_t grid_stride() { return std::size_t{gridDim.x} * blockDim.x; }

template <class U>
__global__ void fill_kernel(U* p, std::size_t n, U value) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) p[i] = value;
}

template <class T>
__global__ void scale_kernel(T* x, std::size_t n, T alpha) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) x[i] *= alpha;
}

template <class T>
__global__ void axpy_kernel(std::size_t n, T alpha, const T* x, T* y) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] += alpha * x[i];
}

template <class T>
__global__ void iota_kernel(T* x, std::size_t n, std::int64_t start) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    x[i] = static_cast<T>(start + static_cast<std::int64_t>(i));
  }
}

// Each thread adds its words' terms; the blocks' sums meet in *result with
// atomicAdd, exact in any order because the sum is modulo 2^64.
__global__ void checksum_kernel(const unsigned char* p, std::size_t bytes, unsigned long long* result) {
  const std::size_t words = (bytes + 7) / 8;
  std::uint64_t sum = 0;
  for (std::size_t k = first_index(); k < words; k += grid_stride()) {
    std::uint64_t w = 0;
    const std::size_t end = (k + 1) * 8 < bytes ? (k + 1) * 8 : bytes;
    for (std::size_t j = end; j-- > k * 8;) w = (w << 8) | p[j];
    sum += host_math::checksum_term(w, k);
  }
  atomicAdd(result, static_cast<unsigned long long>(sum));
}

// Adds sums[0, block_threads) into sums[0]; every thread of the block calls it.
__device__ void block_tree_sum(double* sums) {
  for (unsigned stride = block_threads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
}

template <class T, reduction R>
__global__ void reduce_blocks_kernel(const T* x, std::size_t n, double* partials) {
  __shared__ double sums[block_threads];
  double sum = 0;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const double v = static_cast<double>(x[i]);
    if constexpr (R == reduction::asum) {
      sum += v < 0 ? -v : v;
    } else {
      sum += v * v;
    }
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  block_tree_sum(sums);
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

__global__ void reduce_partials_kernel(const double* partials, unsigned count, double* result) {
  __shared__ double sums[block_threads];
  double sum = 0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sums[threadIdx.x] = sum;
  __syncthreads();
  block_tree_sum(sums);
  if (threadIdx.x == 0) *result = sums[0];
}

template <class T, reduction R>
void launch_reduce(cudaStream_t s, const void* x, std::size_t n, double* scratch) {
  const unsigned blocks = blocks_for(n);
  reduce_blocks_kernel<T, R><<<blocks, block_threads, 0, s>>>(static_cast<const T*>(x), n, scratch + 1);
  SYNCMEM_CUDA_TRY(cudaGetLastError());
  reduce_partials_kernel<<<1, block_threads, 0, s>>>(scratch + 1, blocks, scratch);
  SYNCMEM_CUDA_TRY(cudaGetLastError());
}

template <class U>
void launch_fill(cudaStream_t s, void* p, std::size_t count, std::uint64_t bits) {
  fill_kernel<U><<<blocks_for(count), block_threads, 0, s>>>(static_cast<U*>(p), count, static_cast<U>(bits));
  SYNCMEM_CUDA_TRY(cudaGetLastError());
}

class cuda_kernels_impl final : public device_kernels {
 public:
  void fill(stream_view s, void* p, std::size_t count, std::size_t itemsize, std::uint64_t bits) override {
    if (count == 0) return;
    switch (itemsize) {
      case 1:
        SYNCMEM_CUDA_TRY(cudaMemsetAsync(p, static_cast<int>(bits & 0xFFU), count, native(s)));
        break;
      case 2:
        launch_fill<std::uint16_t>(native(s), p, count, bits);
        break;
      case 4:
        launch_fill<std::uint32_t>(native(s), p, count, bits);
        break;
      default:
        launch_fill<std::uint64_t>(native(s), p, count, bits);
        break;
    }
  }

  void scale(stream_view s, dtype type, void* x, std::size_t n, double alpha) override {
    if (n == 0) return;
    if (type == dtype::float32) {
      scale_kernel<float>
          <<<blocks_for(n), block_threads, 0, native(s)>>>(static_cast<float*>(x), n, static_cast<float>(alpha));
    } else {
      scale_kernel<double><<<blocks_for(n), block_threads, 0, native(s)>>>(static_cast<double*>(x), n, alpha);
    }
    SYNCMEM_CUDA_TRY(cudaGetLastError());
  }

  void axpy(stream_view s, dtype type, std::size_t n, double alpha, const void* x, void* y) override {
    if (n == 0) return;
    if (type == dtype::float32) {
      axpy_kernel<float><<<blocks_for(n), block_threads, 0, native(s)>>>(
          n, static_cast<float>(alpha), static_cast<const float*>(x), static_cast<float*>(y));
    } else {
      axpy_kernel<double><<<blocks_for(n), block_threads, 0, native(s)>>>(n, alpha, static_cast<const double*>(x),
                                                                          static_cast<double*>(y));
    }
    SYNCMEM_CUDA_TRY(cudaGetLastError());
  }

  void iota(stream_view s, dtype type, void* x, std::size_t n, std::int64_t start) override {
    if (n == 0) return;
    const unsigned blocks = blocks_for(n);
    const auto launch = [&]<class T>(T* out) {
      iota_kernel<T><<<blocks, block_threads, 0, native(s)>>>(out, n, start);
    };
    switch (type) {
      case dtype::int32:
        launch(static_cast<std::int32_t*>(x));
        break;
      case dtype::int64:
        launch(static_cast<std::int64_t*>(x));
        break;
      case dtype::float32:
        launch(static_cast<float*>(x));
        break;
      default:
        launch(static_cast<double*>(x));
        break;
    }
    SYNCMEM_CUDA_TRY(cudaGetLastError());
  }

  void checksum(stream_view s, const void* p, std::size_t bytes, void* scratch) override {
    SYNCMEM_CUDA_TRY(cudaMemsetAsync(scratch, 0, sizeof(std::uint64_t), native(s)));
    if (bytes == 0) return;
    checksum_kernel<<<blocks_for((bytes + 7) / 8), block_threads, 0, native(s)>>>(
        static_cast<const unsigned char*>(p), bytes, static_cast<unsigned long long*>(scratch));
    SYNCMEM_CUDA_TRY(cudaGetLastError());
  }

  std::size_t reduce_scratch_bytes(std::size_t n) override { return (std::size_t{1} + blocks_for(n)) * sizeof(double); }

  void reduce(stream_view s, dtype type, reduction r, const void* x, std::size_t n, void* scratch) override {
    auto* out = static_cast<double*>(scratch);
    const bool single = type == dtype::float32;
    if (r == reduction::asum) {
      single ? launch_reduce<float, reduction::asum>(native(s), x, n, out)
             : launch_reduce<double, reduction::asum>(native(s), x, n, out);
    } else {
      single ? launch_reduce<float, reduction::sumsq>(native(s), x, n, out)
             : launch_reduce<double, reduction::sumsq>(native(s), x, n, out);
    }
  }
};

}  // namespace

device_kernels& cuda_kernels() noexcept {
  static auto* const impl = new cuda_kernels_impl{};  // never destroyed: tensors may outlive main()
  return *impl;
}

}  // namespace syncmem::detail
