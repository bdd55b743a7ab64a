// Many small transfers: the batched copy_async (batch_copy.hpp) beside a loop
// of cudaMemcpyAsync and the raw cudaMemcpyBatchAsync (and, on CUDA, beside
// itself with the copy kernel off: syncmem-copy-engines), and N synced
// buffers made current on the device at once beside the same uploads by hand.
//
// Every iteration runs each contender once, in a fresh random order (see
// batched), and times only the benchmark's own (as synced/roundtrip does), so
// that all of them see the driver, the link and the caches in the same state.
// A contender's time is from its first call until the stream has finished its
// copies. The ranges are slices of one allocation on each side, the source of
// slice i going to destination slice (i * 7919) mod N, so that no two copies
// lie end to end and the batch cannot merge them: it measures copies, not
// coalescing.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "bench.hpp"
#include "syncmem/batch_copy.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/stream.hpp"
#include "syncmem/synced_memory.hpp"

#if defined(SYNCMEM_BENCH_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace syncmem::bench {
namespace {

// ours_dma: the batch with its copy kernel off (copy_options::batch_kernel_max_copy 0): no
// kernel copies, and small pageable uploads one DMA each rather than scattered on the device.
enum class method { ours, ours_dma, loop, raw_batch };

std::string method_name(method m, device_id d) {
  switch (m) {
    case method::ours:
      return "syncmem";
    case method::ours_dma:
      return "syncmem-copy-engines";
    case method::loop:
      return d.kind() == device_kind::cuda ? "cudaMemcpyAsync-loop" : "backend-loop";
    case method::raw_batch:
      return "cudaMemcpyBatchAsync";
  }
  return "?";
}

// Source and destination of `count` slices of `bytes`, host side pinned or pageable.
class batch_setup {
 public:
  batch_setup(device_id device, std::size_t count, std::size_t bytes, bool to_device, bool pinned)
      : device_{device}, count_{count}, bytes_{bytes}, to_device_{to_device}, pinned_{pinned}, s_{device} {
    device_guard guard{device};
    auto& backend = detail::backend_for(device);
    const std::size_t total = count * bytes;
    dev_ = static_cast<std::byte*>(backend.allocate(device.index(), total));
    if (pinned) {
      host_ = static_cast<std::byte*>(backend.allocate_pinned(total, 0));
    } else {
      pageable_ = std::make_unique<std::byte[]>(total);
      host_ = pageable_.get();
    }
    std::memset(host_, 1, total);  // touched: no page faults in the figures
    backend.memset_async(dev_, 2, total, device.index(), s_.view().handle());
    s_.synchronize();
    for (std::size_t i = 0; i < count; ++i) {
      std::byte* h = host_ + i * bytes;
      std::byte* d = dev_ + (i * 7919 % count) * bytes;
      requests_.push_back(to_device ? copy_request{d, h, bytes} : copy_request{h, d, bytes});
      dsts_.push_back(requests_.back().dst);
      srcs_.push_back(requests_.back().src);
      sizes_.push_back(bytes);
    }
  }
  batch_setup(const batch_setup&) = delete;
  batch_setup& operator=(const batch_setup&) = delete;
  ~batch_setup() {
    s_.synchronize();
    auto& backend = detail::backend_for(device_);
    backend.deallocate(device_.index(), dev_, count_ * bytes_);
    if (pinned_) backend.deallocate_pinned(host_, count_ * bytes_);
  }

  void run(method m) {
    switch (m) {
      case method::ours:
        copy(requests_, s_);
        return;
      case method::ours_dma: {
        copy_options o = get_copy_options();
        o.batch_kernel_max_copy = 0;
        copy(requests_, s_, o);
        return;
      }
      case method::loop: {
#if defined(SYNCMEM_BENCH_HAS_CUDA)
        if (device_.kind() == device_kind::cuda) {
          auto* cs = s_.view().native_handle();
          const auto kind = to_device_ ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
          for (std::size_t i = 0; i < count_; ++i) cudaMemcpyAsync(dsts_[i], srcs_[i], bytes_, kind, cs);
          cudaStreamSynchronize(cs);
          return;
        }
#endif
        auto& backend = detail::backend_for(device_);
        for (std::size_t i = 0; i < count_; ++i) {
          backend.memcpy_async(dsts_[i], srcs_[i], bytes_, device_.index(), s_.view().handle());
        }
        s_.synchronize();
        return;
      }
      case method::raw_batch: {
#if defined(SYNCMEM_BENCH_HAS_CUDA) && CUDART_VERSION >= 12080
        auto* cs = s_.view().native_handle();
        cudaMemcpyAttributes attributes{};
        attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        std::size_t first = 0;
#if CUDART_VERSION >= 13000
        const cudaError_t status =
            cudaMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(), count_, &attributes, &first, 1, cs);
#else
        std::size_t failed = 0;
        const cudaError_t status = cudaMemcpyBatchAsync(dsts_.data(), const_cast<void**>(srcs_.data()), sizes_.data(),
                                                        count_, &attributes, &first, 1, &failed, cs);
#endif
        if (status != cudaSuccess) {
          cudaGetLastError();
          SYNCMEM_UNSUPPORTED(fmt::format("cudaMemcpyBatchAsync: {}", cudaGetErrorString(status)));
        }
        cudaStreamSynchronize(cs);
        return;
#else
        SYNCMEM_UNSUPPORTED("cudaMemcpyBatchAsync needs a CUDA 12.8 or later build");
#endif
      }
    }
  }

 private:
  device_id device_;
  std::size_t count_;
  std::size_t bytes_;
  bool to_device_;
  bool pinned_;
  stream s_;
  std::byte* dev_ = nullptr;
  std::byte* host_ = nullptr;
  std::unique_ptr<std::byte[]> pageable_;
  std::vector<copy_request> requests_;
  std::vector<void*> dsts_;
  std::vector<const void*> srcs_;
  std::vector<std::size_t> sizes_;
};

void batched(benchmark::State& state, device_id device, std::size_t count, std::size_t bytes, bool to_device,
             bool pinned, method mine, std::vector<method> all) {
  batch_setup setup{device, count, bytes, to_device, pinned};
  for (const method m : all) setup.run(m);  // warm: staging, pool threads, driver
  using clock = std::chrono::steady_clock;
  double total = 0;
  // Each iteration runs the contenders in a fresh random order, so that each
  // follows every other about as often: a pageable upload runs a quarter
  // slower after other work than right after itself (docs/transfers.md), and
  // a fixed cycle would have each one follow the same neighbour.
  std::mt19937 shuffle{20261127};
  std::vector<method> order = all;
  for (auto _ : state) {
    double mine_seconds = 0;
    std::shuffle(order.begin(), order.end(), shuffle);
    for (const method m : order) {
      const auto start = clock::now();
      setup.run(m);
      if (m == mine) mine_seconds = std::chrono::duration<double>(clock::now() - start).count();
    }
    state.SetIterationTime(mine_seconds);
    total += mine_seconds;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(count * bytes * state.iterations()));
  if (state.iterations() > 0) {
    state.counters["us_per_buffer"] = total * 1e6 / static_cast<double>(count * state.iterations());
  }
}

// ---- N synced buffers made current on the device ---------------------------------------

class prefetch_setup {
 public:
  prefetch_setup(device_id device, std::size_t count, std::size_t bytes) : device_{device}, bytes_{bytes}, s_{device} {
    for (std::size_t i = 0; i < count; ++i) {
      buffers_.push_back(std::make_unique<synced_memory>(bytes, device));
      pointers_.push_back(buffers_.back().get());
      std::memset(buffers_.back()->mutable_host_data(), 3, bytes);
      (void)buffers_.back()->device_data(s_);  // both sides allocated
    }
    device_guard guard{device};
    auto& backend = detail::backend_for(device);
    for (std::size_t i = 0; i < count; ++i) {
      host_.push_back(backend.allocate_pinned(bytes, 0));
      dev_.push_back(backend.allocate(device.index(), bytes));
    }
    s_.synchronize();
  }
  prefetch_setup(const prefetch_setup&) = delete;
  prefetch_setup& operator=(const prefetch_setup&) = delete;
  ~prefetch_setup() {
    s_.synchronize();
    auto& backend = detail::backend_for(device_);
    for (std::size_t i = 0; i < host_.size(); ++i) {
      backend.deallocate(device_.index(), dev_[i], bytes_);
      backend.deallocate_pinned(host_[i], bytes_);
    }
  }

  // The host writes every buffer, then all are made current on the device.
  void run(bool ours) {
    if (ours) {
      for (synced_memory* m : pointers_) static_cast<char*>(m->mutable_host_data())[0] = 4;
      prefetch_to_device(pointers_, s_);
      s_.synchronize();
      return;
    }
    for (void* h : host_) static_cast<char*>(h)[0] = 4;
#if defined(SYNCMEM_BENCH_HAS_CUDA)
    if (device_.kind() == device_kind::cuda) {
      auto* cs = s_.view().native_handle();
      for (std::size_t i = 0; i < host_.size(); ++i)
        cudaMemcpyAsync(dev_[i], host_[i], bytes_, cudaMemcpyHostToDevice, cs);
      cudaStreamSynchronize(cs);
      return;
    }
#endif
    auto& backend = detail::backend_for(device_);
    for (std::size_t i = 0; i < host_.size(); ++i) {
      backend.memcpy_async(dev_[i], host_[i], bytes_, device_.index(), s_.view().handle());
    }
    s_.synchronize();
  }

 private:
  device_id device_;
  std::size_t bytes_;
  stream s_;
  std::vector<std::unique_ptr<synced_memory>> buffers_;
  std::vector<synced_memory*> pointers_;
  std::vector<void*> host_;
  std::vector<void*> dev_;
};

void prefetch(benchmark::State& state, device_id device, std::size_t count, std::size_t bytes, bool ours) {
  prefetch_setup setup{device, count, bytes};
  setup.run(true);
  setup.run(false);
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    setup.run(!ours);  // untimed: the other one
    const auto start = clock::now();
    setup.run(ours);
    state.SetIterationTime(std::chrono::duration<double>(clock::now() - start).count());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(count * bytes * state.iterations()));
}

}  // namespace

void register_batch_suite(const options& o) {
  const device_id d = o.first();
  const double min_time = o.min_time();
  const std::size_t count = o.quick ? 100 : 1000;
  std::vector<method> all{method::ours, method::loop};
  if (d.kind() == device_kind::cuda) {
    all.insert(all.begin() + 1, method::ours_dma);
    all.push_back(method::raw_batch);
  }
  for (const std::size_t bytes : {std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{256} << 10}) {
    for (const bool to_device : {false, true}) {
      for (const bool pinned : {true, false}) {
        const std::string what = fmt::format("{}-{}", to_device ? "h2d" : "d2h", pinned ? "pinned" : "pageable");
        for (const method m : all) {
          register_benchmark(fmt::format("batch/{}/{}/{}x{}", what, method_name(m, d), count, size_name(bytes)),
                             batched, d, count, bytes, to_device, pinned, m, all)
              ->MinTime(min_time)
              ->UseManualTime();
        }
      }
    }
  }
  const std::size_t buffers = o.quick ? 64 : 256;
  for (const std::size_t bytes : {std::size_t{4} << 10, std::size_t{64} << 10}) {
    for (const bool ours : {true, false}) {
      const std::string who =
          ours ? "syncmem" : (d.kind() == device_kind::cuda ? "cudaMemcpyAsync-loop" : "backend-loop");
      register_benchmark(fmt::format("batch/prefetch/{}/{}x{}", who, buffers, size_name(bytes)), prefetch, d, buffers,
                         bytes, ours)
          ->MinTime(min_time)
          ->UseManualTime();
    }
  }
}

}  // namespace syncmem::bench
