// tensor: reshape churn, as in dynamic-shape inference, where every request
// brings a batch of another size through the same buffers. A tensor reshaped
// among N shapes reuses its capacity: once it has held the largest it
// allocates nothing more. Beside it, the same requests served by a buffer
// allocated afresh for each shape (code without a notion of capacity). The
// user counter "reallocations" is the number of allocations made while
// timing: 0 for syncmem in the steady state, one per iteration for the
// baseline.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "bench.hpp"
#include "syncmem/stream.hpp"
#include "syncmem/tensor.hpp"

namespace syncmem::bench {
namespace {

constexpr std::int64_t features = 256 * 1024;  // floats per batch item: 1 MiB

// `n` batch shapes (b, 256 × 1024) with b drawn from 1..32, the same every run.
std::vector<shape> churn_shapes(int n) {
  std::mt19937 rng{20240607U + static_cast<unsigned>(n)};
  std::uniform_int_distribution<std::int64_t> batch{1, 32};
  std::vector<shape> shapes;
  for (int i = 0; i < n; ++i) shapes.push_back(shape{batch(rng), features});
  return shapes;
}

// Contents are written by each request, so neither side zero-fills.
synced_memory_options churn_options() { return {.label = "bench-reshape-churn", .zero_fill = false}; }

void churn_syncmem(benchmark::State& state, device_id device, const std::vector<shape>& shapes) {
  stream s{device};
  tensor t{dtype::float32, shapes.front(), device, churn_options()};
  for (const shape& sh : shapes) {  // warm-up: the largest shape allocates, once
    t.reshape(sh);
    benchmark::DoNotOptimize(t.mutable_device_data(s));
  }
  const std::uint64_t before = t.reallocations();
  std::size_t i = 0;
  for (auto _ : state) {
    t.reshape(shapes[i]);
    benchmark::DoNotOptimize(t.mutable_device_data(s));
    i = i + 1 == shapes.size() ? 0 : i + 1;
  }
  s.synchronize();
  state.counters["reallocations"] = static_cast<double>(t.reallocations() - before);
}

void churn_realloc_every_time(benchmark::State& state, device_id device, const std::vector<shape>& shapes) {
  stream s{device};
  std::uint64_t allocations = 0;
  std::size_t i = 0;
  for (auto _ : state) {
    tensor t{dtype::float32, shapes[i], device, churn_options()};
    benchmark::DoNotOptimize(t.mutable_device_data(s));
    ++allocations;
    i = i + 1 == shapes.size() ? 0 : i + 1;
  }  // each tensor frees its memory as it goes
  s.synchronize();
  state.counters["reallocations"] = static_cast<double>(allocations);
}

}  // namespace

void register_tensor_suite(const options& o) {
  const device_id d = o.first();
  const double min_time = o.min_time();
  std::vector<int> counts{2, 8, 32};
  if (o.quick) counts = {2, 8};
  for (int n : counts) {
    const auto shapes = churn_shapes(n);
    register_benchmark(fmt::format("tensor/reshape-churn/syncmem/{}sizes", n).c_str(), churn_syncmem, d, shapes)
        ->MinTime(min_time)
        ->UseRealTime();
    register_benchmark(fmt::format("tensor/reshape-churn/realloc-every-time/{}sizes", n).c_str(),
                       churn_realloc_every_time, d, shapes)
        ->MinTime(min_time)
        ->UseRealTime();
  }
}

}  // namespace syncmem::bench
