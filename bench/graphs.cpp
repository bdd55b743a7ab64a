// Replaying a captured step that allocates: syncmem's graph pools (a
// caching_resource allocating on the capturing stream) beside the same step
// captured with cudaMallocAsync/cudaFreeAsync (CUDA's graph memory nodes).
//
// The step: the input comes up from pinned memory into a new block, then
// `layers` times a new block is allocated, the last one copied into it and
// the last one freed; the result goes down to pinned memory and the last
// block is freed. Each iteration launches both graphs in turn and waits for
// each; a contender's time is its launch until the stream is idle. The
// counter reserved_MiB is what each keeps from the device for its graph: the
// graph pool's reserved bytes, or CUDA's graph memory (cudaGraphMemAttrReservedMemCurrent).

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "bench.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/graph.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/stream.hpp"

#if defined(SYNCMEM_BENCH_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace syncmem::bench {
namespace {

enum class contender { graph_pool, malloc_async };

std::string contender_name(contender c) { return c == contender::graph_pool ? "syncmem" : "cudaMallocAsync"; }

class graph_setup {
 public:
  graph_setup(device_id device, std::size_t bytes, int layers)
      : device_{device}, bytes_{bytes}, layers_{layers}, s_{device}, resource_{std::in_place, device} {
    device_guard guard{device};
    auto& backend = detail::backend_for(device);
    in_ = backend.allocate_pinned(bytes, 0);
    out_ = backend.allocate_pinned(bytes, 0);
    std::memset(in_, 1, bytes);
    std::memset(out_, 0, bytes);
    ours_ = capture_ours();
#if defined(SYNCMEM_BENCH_HAS_CUDA)
    if (device.kind() == device_kind::cuda) theirs_ = capture_theirs();
#endif
  }
  graph_setup(const graph_setup&) = delete;
  graph_setup& operator=(const graph_setup&) = delete;
  ~graph_setup() {
    s_.synchronize();
    ours_ = graph{};
    theirs_.reset();
    resource_.reset();
    auto& backend = detail::backend_for(device_);
    backend.deallocate_pinned(in_, bytes_);
    backend.deallocate_pinned(out_, bytes_);
  }

  [[nodiscard]] bool has(contender c) const { return c == contender::graph_pool || theirs_.has_value(); }

  void run(contender c) {
    (c == contender::graph_pool ? ours_ : *theirs_).launch(s_);
    s_.synchronize();
  }

  [[nodiscard]] double reserved_mib(contender c) const {
    if (c == contender::graph_pool) return static_cast<double>(ours_.pool().reserved_bytes()) / (1 << 20);
#if defined(SYNCMEM_BENCH_HAS_CUDA)
    device_guard guard{device_};
    unsigned long long reserved = 0;
    if (cudaDeviceGetGraphMemAttribute(device_.index(), cudaGraphMemAttrReservedMemCurrent, &reserved) != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return static_cast<double>(reserved) / (1 << 20);
#else
    return -1;
#endif
  }

 private:
  graph capture_ours() {
    begin_capture(s_);
    void* last = resource_->allocate(bytes_, s_);
    (void)copy_async(last, in_, bytes_, s_);
    for (int i = 0; i < layers_; ++i) {
      void* next = resource_->allocate(bytes_, s_);
      (void)copy_async(next, last, bytes_, s_);
      resource_->deallocate(last, bytes_, s_);
      last = next;
    }
    (void)copy_async(out_, last, bytes_, s_);
    resource_->deallocate(last, bytes_, s_);
    return end_capture(s_);
  }

#if defined(SYNCMEM_BENCH_HAS_CUDA)
  graph capture_theirs() {
    auto* cs = s_.view().native_handle();
    begin_capture(s_);
    void* last = nullptr;
    SYNCMEM_CUDA_TRY(cudaMallocAsync(&last, bytes_, cs));
    SYNCMEM_CUDA_TRY(cudaMemcpyAsync(last, in_, bytes_, cudaMemcpyHostToDevice, cs));
    for (int i = 0; i < layers_; ++i) {
      void* next = nullptr;
      SYNCMEM_CUDA_TRY(cudaMallocAsync(&next, bytes_, cs));
      SYNCMEM_CUDA_TRY(cudaMemcpyAsync(next, last, bytes_, cudaMemcpyDeviceToDevice, cs));
      SYNCMEM_CUDA_TRY(cudaFreeAsync(last, cs));
      last = next;
    }
    SYNCMEM_CUDA_TRY(cudaMemcpyAsync(out_, last, bytes_, cudaMemcpyDeviceToHost, cs));
    SYNCMEM_CUDA_TRY(cudaFreeAsync(last, cs));
    return end_capture(s_);
  }
#endif

  device_id device_;
  std::size_t bytes_;
  int layers_;
  stream s_;
  std::optional<mr::caching_resource> resource_;
  void* in_ = nullptr;
  void* out_ = nullptr;
  graph ours_;
  std::optional<graph> theirs_;
};

void replay(benchmark::State& state, device_id device, std::size_t bytes, int layers, contender mine) {
  graph_setup setup{device, bytes, layers};
  if (!setup.has(mine)) {
    skip(state, fmt::format("{} graphs need a CUDA device", contender_name(mine)));
    return;
  }
  std::vector<contender> all{contender::graph_pool};
  if (setup.has(contender::malloc_async)) all.push_back(contender::malloc_async);
  for (const contender c : all) setup.run(c);  // warm: first launches upload the graphs
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    double mine_seconds = 0;
    for (const contender c : all) {
      const auto start = clock::now();
      setup.run(c);
      if (c == mine) mine_seconds = std::chrono::duration<double>(clock::now() - start).count();
    }
    state.SetIterationTime(mine_seconds);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * (layers + 2) * state.iterations());
  state.counters["reserved_MiB"] = setup.reserved_mib(mine);
}

}  // namespace

void register_graph_suite(const options& o) {
  const device_id d = o.first();
  const std::vector<std::size_t> sizes =
      o.quick ? std::vector<std::size_t>{std::size_t{1} << 20}
              : std::vector<std::size_t>{std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{16} << 20};
  const int layers = 8;
  for (const std::size_t bytes : sizes) {
    for (const contender c : {contender::graph_pool, contender::malloc_async}) {
      register_benchmark(fmt::format("graph/replay/{}/{}x{}", contender_name(c), layers, size_name(bytes)), replay, d,
                         bytes, layers, c)
          ->MinTime(o.min_time())
          ->UseManualTime();
    }
  }
}

}  // namespace syncmem::bench
