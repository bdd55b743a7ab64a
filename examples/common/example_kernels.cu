#include "example_kernels.hpp"
#include "example_math.hpp"
#include "syncmem/cuda/interop.hpp"
#include "syncmem/device_guard.hpp"

namespace examples::cuda {
namespace {

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b == 0 ? 1 : (b < 65535 ? b : 65535));
}

__global__ void transform_kernel(const float* x, float* y, std::size_t n, float scale, float offset, int rounds) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    y[i] = math::transform(x[i], scale, offset, rounds);
  }
}

__global__ void leaky_kernel(float* x, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    x[i] = math::leaky(x[i]);
  }
}

__global__ void relu_forward_kernel(const float* bottom, float* top, std::size_t n, float slope) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    top[i] = math::relu(bottom[i], slope);
  }
}

__global__ void relu_backward_kernel(const float* top_diff, const float* bottom, float* bottom_diff, std::size_t n,
                                     float slope) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    bottom_diff[i] = math::relu_grad(top_diff[i], bottom[i], slope);
  }
}

}  // namespace

void transform(syncmem::stream_view s, const float* x, float* y, std::size_t n, float scale, float offset, int rounds) {
  syncmem::device_guard guard{s.device()};
  transform_kernel<<<blocks_for(n), 256, 0, syncmem::cuda::native(s)>>>(x, y, n, scale, offset, rounds);
  SYNCMEM_CUDA_TRY(cudaGetLastError());
}

void leaky_activate(syncmem::stream_view s, float* x, std::size_t n) {
  syncmem::device_guard guard{s.device()};
  leaky_kernel<<<blocks_for(n), 256, 0, syncmem::cuda::native(s)>>>(x, n);
  SYNCMEM_CUDA_TRY(cudaGetLastError());
}

void relu_forward(syncmem::stream_view s, const float* bottom, float* top, std::size_t n, float slope) {
  syncmem::device_guard guard{s.device()};
  relu_forward_kernel<<<blocks_for(n), 256, 0, syncmem::cuda::native(s)>>>(bottom, top, n, slope);
  SYNCMEM_CUDA_TRY(cudaGetLastError());
}

void relu_backward(syncmem::stream_view s, const float* top_diff, const float* bottom, float* bottom_diff,
                   std::size_t n, float slope) {
  syncmem::device_guard guard{s.device()};
  relu_backward_kernel<<<blocks_for(n), 256, 0, syncmem::cuda::native(s)>>>(top_diff, bottom, bottom_diff, n, slope);
  SYNCMEM_CUDA_TRY(cudaGetLastError());
}

}  // namespace examples::cuda
