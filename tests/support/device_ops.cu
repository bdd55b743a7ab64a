// Test kernels. Also compiles the umbrella header with nvcc (STYLE.md 6).

#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/cuda/interop.hpp"
#include "syncmem/syncmem.hpp"

namespace syncmem::test::cuda_ops {
namespace {

__global__ void fill_pattern_kernel(std::uint8_t* p, std::size_t bytes, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < bytes;
       i += std::size_t{gridDim.x} * blockDim.x) {
    p[i] = pattern_byte(seed, i);
  }
}

__global__ void add_bytes_kernel(std::uint8_t* p, std::size_t bytes, std::uint8_t delta) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < bytes;
       i += std::size_t{gridDim.x} * blockDim.x) {
    p[i] = static_cast<std::uint8_t>(p[i] + delta);
  }
}

__global__ void sleep_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}

unsigned blocks_for(std::size_t bytes) {
  const std::size_t blocks = (bytes + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? (blocks == 0 ? 1 : blocks) : 4096);
}

}  // namespace

void fill_pattern(stream_view s, void* p, std::size_t bytes, std::uint64_t seed) {
  if (bytes == 0) return;
  device_guard guard{s.device()};
  fill_pattern_kernel<<<blocks_for(bytes), 256, 0, cuda::native(s)>>>(static_cast<std::uint8_t*>(p), bytes, seed);
  SYNCMEM_CUDA_TRY(cudaGetLastError());
}

void add_bytes(stream_view s, void* p, std::size_t bytes, std::uint8_t delta) {
  if (bytes == 0) return;
  device_guard guard{s.device()};
  add_bytes_kernel<<<blocks_for(bytes), 256, 0, cuda::native(s)>>>(static_cast<std::uint8_t*>(p), bytes, delta);
  SYNCMEM_CUDA_TRY(cudaGetLastError());
}

void sleep(stream_view s, std::chrono::microseconds duration) {
  device_guard guard{s.device()};
  int clock_khz = 0;
  SYNCMEM_CUDA_TRY(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, s.device().index()));
  const long long cycles = static_cast<long long>(clock_khz) * duration.count() / 1000;
  sleep_kernel<<<1, 1, 0, cuda::native(s)>>>(cycles);
  SYNCMEM_CUDA_TRY(cudaGetLastError());
}

void capture_and_launch(stream_view s, const std::function<void()>& enqueue,
                        const std::function<void()>& before_launch) {
  device_guard guard{s.device()};
  cudaStream_t native = cuda::native(s);
  SYNCMEM_CUDA_TRY(cudaStreamBeginCapture(native, cudaStreamCaptureModeRelaxed));
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    (void)cudaStreamEndCapture(native, &graph);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    throw;
  }
  SYNCMEM_CUDA_TRY(cudaStreamEndCapture(native, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  SYNCMEM_CUDA_TRY(instantiated);
  before_launch();
  const cudaError_t launched = cudaGraphLaunch(exec, native);
  const cudaError_t done = launched == cudaSuccess ? cudaStreamSynchronize(native) : launched;
  (void)cudaGraphExecDestroy(exec);
  SYNCMEM_CUDA_TRY(done);
}

int exchange_capture_mode(int mode) {
  static_assert(capture_mode_global == cudaStreamCaptureModeGlobal &&
                capture_mode_thread_local == cudaStreamCaptureModeThreadLocal);
  auto m = static_cast<cudaStreamCaptureMode>(mode);
  SYNCMEM_CUDA_TRY(cudaThreadExchangeStreamCaptureMode(&m));
  return static_cast<int>(m);
}

}  // namespace syncmem::test::cuda_ops
