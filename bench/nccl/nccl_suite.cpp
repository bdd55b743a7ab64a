// All-reduce through syncmem::nccl beside raw NCCL, on two or more GPUs:
//
//   nccl/allreduce/<method>/<size>   bus bandwidth (algorithm bandwidth × 2(n-1)/n, as nccl-tests)
//
// methods: syncmem (communicator on device_buffers from a caching_resource),
// syncmem-registered (another caching_resource, its segments registered with
// ncclCommRegister), syncmem-ncclMemAlloc (a registered caching_resource over
// nccl_resource), and raw NCCL: nccl-cudaMalloc (cudaMalloc'd buffers),
// nccl-registered (cudaMalloc'd and ncclCommRegister'd), nccl-ncclMemAlloc
// (ncclMemAlloc'd and registered: NCCL's own zero-copy setup). Every iteration
// runs each method once, in turn, starting one method further each time, in
// place on float32 buffers of its own, and times only the benchmark's own:
// from its first call until every rank's stream has finished. With fewer than
// two GPUs the suite registers one benchmark, which skips saying why. Peer
// copies are transfer/peer (transfers.cpp).

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench.hpp"
#include "syncmem/cuda/interop.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_buffer.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/nccl/communicator.hpp"
#include "syncmem/nccl/group.hpp"
#include "syncmem/nccl/nccl_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::bench {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

enum class method { ours, ours_registered, ours_nccl_memory, raw, raw_registered, raw_nccl_memory };
constexpr method all_methods[] = {method::ours, method::ours_registered, method::ours_nccl_memory,
                                  method::raw,  method::raw_registered,  method::raw_nccl_memory};

const char* method_name(method m) {
  switch (m) {
    case method::ours:
      return "syncmem";
    case method::ours_registered:
      return "syncmem-registered";
    case method::raw:
      return "nccl-cudaMalloc";
    case method::raw_registered:
      return "nccl-registered";
    case method::ours_nccl_memory:
      return "syncmem-ncclMemAlloc";
    case method::raw_nccl_memory:
      return "nccl-ncclMemAlloc";
  }
  return "?";
}

void nccl_try(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) SYNCMEM_FAIL(fmt::format("{}: {}", what, ncclGetErrorString(r)));
}

// What every benchmark of the suite shares, made once: our communicators,
// NCCL's own, the streams and the pools. Never destroyed (the benchmarks run
// until the process ends).
struct context {
  std::vector<device_id> devices;
  std::vector<stream> streams;
  std::vector<nccl::communicator> ours;
  std::vector<ncclComm_t> raw;
  std::vector<std::unique_ptr<nccl::nccl_resource>> nccl_memory;
  std::vector<std::unique_ptr<mr::caching_resource>> plain_pools, registered_pools, nccl_pools;

  explicit context(const std::vector<device_id>& d) : devices{d} {
    ::setenv("NCCL_NVLS_ENABLE", "0", 0);  // no multicast objects
    ours = nccl::communicator::create_all(devices);
    raw.resize(devices.size());
    std::vector<int> ordinals;
    for (const auto x : devices) ordinals.push_back(x.index());
    nccl_try(ncclCommInitAll(raw.data(), static_cast<int>(raw.size()), ordinals.data()), "ncclCommInitAll");
    for (std::size_t r = 0; r < devices.size(); ++r) {
      streams.emplace_back(devices[r]);
      plain_pools.push_back(std::make_unique<mr::caching_resource>(devices[r]));
      registered_pools.push_back(std::make_unique<mr::caching_resource>(devices[r]));
      ours[r].register_segments(*registered_pools.back());
      nccl_memory.push_back(std::make_unique<nccl::nccl_resource>(devices[r]));
      nccl_pools.push_back(
          std::make_unique<mr::caching_resource>(devices[r], mr::caching_options{}, nccl_memory.back().get()));
      ours[r].register_segments(*nccl_pools.back());
    }
  }
};

// The buffers of one size: per method and rank, `bytes` of float32.
class allreduce_setup {
 public:
  allreduce_setup(context& c, std::size_t bytes) : c_{c}, bytes_{bytes} {
    const std::size_t n = c.devices.size();
    for (std::size_t r = 0; r < n; ++r) {
      const stream_view s = c.streams[r];
      plain_.emplace_back(bytes, s, c.plain_pools[r].get());
      registered_.emplace_back(bytes, s, c.registered_pools[r].get());
      nccl_memory_.emplace_back(bytes, s, c.nccl_pools[r].get());
      device_guard guard{c.devices[r]};
      void* p = nullptr;
      void* q = nullptr;
      void* m = nullptr;
      SYNCMEM_CUDA_TRY(cudaMalloc(&p, bytes));
      SYNCMEM_CUDA_TRY(cudaMalloc(&q, bytes));
      nccl_try(ncclMemAlloc(&m, bytes), "ncclMemAlloc");
      raw_.push_back(p);
      raw_registered_.push_back(q);
      raw_nccl_memory_.push_back(m);
      for (void* x : {q, m}) {
        void* handle = nullptr;
        nccl_try(ncclCommRegister(c.raw[r], x, bytes, &handle), "ncclCommRegister");
        handles_.push_back(handle);
      }
      for (void* x : {p, q, m, plain_.back().data(), registered_.back().data(), nccl_memory_.back().data()}) {
        SYNCMEM_CUDA_TRY(cudaMemsetAsync(x, 0, bytes, cuda::native(s)));
      }
    }
    sync();
  }
  allreduce_setup(const allreduce_setup&) = delete;
  allreduce_setup& operator=(const allreduce_setup&) = delete;
  ~allreduce_setup() {
    sync();
    for (std::size_t r = 0; r < raw_.size(); ++r) {
      device_guard guard{c_.devices[r]};
      (void)ncclCommDeregister(c_.raw[r], handles_[2 * r]);
      (void)ncclCommDeregister(c_.raw[r], handles_[2 * r + 1]);
      (void)cudaFree(raw_[r]);
      (void)cudaFree(raw_registered_[r]);
      (void)ncclMemFree(raw_nccl_memory_[r]);
    }
  }

  void run(method m) {
    const std::size_t count = bytes_ / sizeof(float);
    if (m == method::ours || m == method::ours_registered || m == method::ours_nccl_memory) {
      auto& buffers = m == method::ours ? plain_ : m == method::ours_registered ? registered_ : nccl_memory_;
      nccl::group g;
      for (std::size_t r = 0; r < buffers.size(); ++r) {
        c_.ours[r].all_reduce(buffers[r], buffers[r], dtype::float32, nccl::reduce_op::sum, c_.streams[r]);
      }
      g.end();
    } else {
      const auto& pointers = m == method::raw ? raw_ : m == method::raw_registered ? raw_registered_ : raw_nccl_memory_;
      nccl_try(ncclGroupStart(), "ncclGroupStart");
      for (std::size_t r = 0; r < pointers.size(); ++r) {
        nccl_try(ncclAllReduce(pointers[r], pointers[r], count, ncclFloat32, ncclSum, c_.raw[r],
                               cuda::native(c_.streams[r].view())),
                 "ncclAllReduce");
      }
      nccl_try(ncclGroupEnd(), "ncclGroupEnd");
    }
    sync();
  }

 private:
  void sync() {
    for (auto& s : c_.streams) s.synchronize();
  }

  context& c_;
  std::size_t bytes_;
  std::vector<device_buffer> plain_, registered_, nccl_memory_;
  std::vector<void*> raw_, raw_registered_, raw_nccl_memory_, handles_;
};

// Made by the first benchmark that runs; what it takes on each device is
// declared kept (bench.hpp), so that the check between benchmarks does not
// count it as that benchmark's leak. NCCL sets up its channels and
// connections at a communicator's first collective, not when it is made
// (about 760 MiB per GPU on two H200s): every method runs once first, so
// that this is counted too.
context& shared_context(const std::vector<device_id>& devices) {
  static auto* const c = [&devices] {
    std::vector<std::size_t> before;
    for (const auto d : devices) before.push_back(get_memory_info(d).total - get_memory_info(d).free);
    auto* made = new context{devices};
    {
      allreduce_setup warm{*made, MiB};
      for (const method m : all_methods) warm.run(m);
    }
    for (auto* pools : {&made->plain_pools, &made->registered_pools, &made->nccl_pools}) {
      for (auto& p : *pools) p->empty_cache();
    }
    for (std::size_t r = 0; r < devices.size(); ++r) {
      const auto m = get_memory_info(devices[r]);
      const std::size_t used = m.total - m.free;
      if (used > before[r]) keep_device_memory(devices[r], used - before[r]);
    }
    add_release_hook([made] {
      for (auto* pools : {&made->plain_pools, &made->registered_pools, &made->nccl_pools}) {
        for (auto& p : *pools) p->empty_cache();
      }
    });
    return made;
  }();
  return *c;
}

void run_allreduce(benchmark::State& state, std::vector<device_id> devices, std::size_t bytes, method mine) {
  auto& c = shared_context(devices);
  allreduce_setup setup{c, bytes};
  for (const method m : all_methods) setup.run(m);  // warm: NCCL's channels and registrations
  using clock = std::chrono::steady_clock;
  std::size_t first = 0;  // each iteration starts with the next method, so none always follows the same one
  for (auto _ : state) {
    double mine_seconds = 0;
    for (std::size_t k = 0; k < std::size(all_methods); ++k) {
      const method m = all_methods[(first + k) % std::size(all_methods)];
      const auto start = clock::now();
      setup.run(m);
      if (m == mine) mine_seconds = std::chrono::duration<double>(clock::now() - start).count();
    }
    state.SetIterationTime(mine_seconds);
    first = (first + 1) % std::size(all_methods);
  }
  const double n = static_cast<double>(devices.size());
  const double bus_factor = 2 * (n - 1) / n;
  state.SetBytesProcessed(static_cast<std::int64_t>(static_cast<double>(bytes) * bus_factor) * state.iterations());
  state.counters["ranks"] = n;
}

}  // namespace

void register_nccl_suite(const options& o) {
  std::vector<device_id> gpus;
  for (const auto d : o.devices) {
    if (d.kind() == device_kind::cuda) gpus.push_back(d);
  }
  if (gpus.size() < 2) {
    const std::size_t have = gpus.size();
    register_benchmark("nccl/allreduce/syncmem/1MiB", [have](benchmark::State& state) {
      skip(state, fmt::format("needs 2 CUDA devices, this machine has {}", have));
    });
    return;
  }
  const std::vector<std::size_t> sizes =
      o.quick ? std::vector<std::size_t>{1 * MiB, 64 * MiB}
              : std::vector<std::size_t>{1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB};
  for (const std::size_t n : sizes) {
    for (const method m : all_methods) {
      register_benchmark(fmt::format("nccl/allreduce/{}/{}", method_name(m), size_name(n)),
                         [gpus, n, m](benchmark::State& state) { run_allreduce(state, gpus, n, m); })
          ->UseManualTime()
          ->MinTime(o.min_time())
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace syncmem::bench
