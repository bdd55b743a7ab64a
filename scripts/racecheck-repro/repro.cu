// Plain CUDA, no syncmem: the calls the stress test's workers make, from 8
// threads at once, to see whether compute-sanitizer racecheck hangs on them.
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#define CHECK(x) do { cudaError_t err_ = (x); if (err_ != cudaSuccess) { std::printf("%s: %s\n", #x, cudaGetErrorString(err_)); std::exit(1); } } while (0)

__global__ void add(unsigned char* p, size_t n, unsigned char d) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] += d;
}
__global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  std::mutex pool_mutex;
  std::vector<cudaEvent_t> pool;
  for (int i = 0; i < 16; ++i) { cudaEvent_t e; CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); pool.push_back(e); }
  std::atomic<long> steps{0};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      cudaStream_t s[3];
      for (auto& x : s) CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
      const size_t n = 1 << 20;
      unsigned char *d, *h;
      CHECK(cudaMalloc(&d, n));
      CHECK(cudaMallocHost(&h, n));
      std::vector<unsigned char> pageable(n);
      while (std::chrono::steady_clock::now() < deadline) {
        cudaStream_t st = s[rng() % 3];
        switch (rng() % 8) {
          case 0: spin<<<1, 1, 0, st>>>(10000); CHECK(cudaGetLastError()); break;
          case 1: add<<<64, 256, 0, st>>>(d, n, 1); CHECK(cudaGetLastError()); break;
          case 2: CHECK(cudaMemcpyAsync(d, h, n, cudaMemcpyDefault, st)); break;
          case 3: CHECK(cudaMemcpyAsync(pageable.data(), d, n, cudaMemcpyDefault, st)); break;
          case 4: { std::lock_guard l{pool_mutex}; CHECK(cudaEventRecord(pool[rng() % pool.size()], st)); break; }
          case 5: { std::lock_guard l{pool_mutex}; CHECK(cudaStreamWaitEvent(st, pool[rng() % pool.size()], 0)); break; }
          case 6: { cudaEvent_t e; CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); CHECK(cudaEventRecord(e, st)); CHECK(cudaEventSynchronize(e)); CHECK(cudaEventDestroy(e)); break; }
          default: CHECK(cudaStreamSynchronize(st)); break;
        }
        ++steps;
      }
      for (auto& x : s) { CHECK(cudaStreamSynchronize(x)); CHECK(cudaStreamDestroy(x)); }
      CHECK(cudaFree(d));
      CHECK(cudaFreeHost(h));
    });
  }
  for (auto& th : threads) th.join();
  std::printf("steps %ld\n", steps.load());
  return 0;
}
