#pragma once

// The benchmark suites. Each registers Google Benchmark benchmarks; the
// bench/syncmem_benchmarks program runs them with Google Benchmark's own
// output, and `syncmem bench` runs the same ones with its own reporter
// (table, JSON, HTML).
//
// Names follow one pattern, which the reporters parse:
//
//     <suite>/<case>/<method>/<parameter>
//
//   suite      transfer, alloc, pinned, synced, tensor, batch, graph, nccl, memcpy (the host reference)
//   case       what is measured: h2d, d2h, d2d, pair, churn, threads, replay, fit, ...
//   method     who does it: ours ("syncmem", "caching", "engine") or the
//              alternative in the same run ("cudaMemcpy", "cudaMallocAsync", "pytorch", ...).
//              The report counts as ours every method named syncmem, engine,
//              caching or synced, alone or followed by "-..." ("syncmem-stream",
//              "caching-expandable"); every other method is an alternative.
//   parameter  the size ("4KiB", "1GiB") or another parameter ("64slots", "8threads")
//
// Figures: latency is the benchmark's real time per iteration (use manual
// time with device events where the work is asynchronous); bandwidth is
// SetBytesProcessed; anything else is a user counter (e.g. "peak_ratio").

#include <benchmark/benchmark.h>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "syncmem/device_id.hpp"
#include "syncmem/error.hpp"

namespace syncmem::bench {

struct options {
  bool quick = false;              // fewer sizes and shorter runs (syncmem bench --quick: about 30 s)
  std::vector<device_id> devices;  // the devices to run on: every CUDA device, else emulated:0
  [[nodiscard]] bool gpu() const;  // whether the figures come from a GPU
  [[nodiscard]] device_id first() const { return devices.front(); }
  [[nodiscard]] double min_time() const { return quick ? 0.01 : 0.2; }  // seconds per benchmark
};

// The devices to benchmark on this machine (enables one emulated device when
// there is no GPU) and the options for them.
[[nodiscard]] options default_options(bool quick);

// About how long the benchmark named `name` takes, in seconds, for the
// estimate `syncmem bench` prints before it starts and while it runs.
[[nodiscard]] double expected_seconds(std::string_view name, const options& o);

// What a skipped (not failed) run's message starts with under Google
// Benchmark 1.7, which has only SkipWithError; `syncmem bench` lists such runs
// as skipped, with the reason, and does not count them as failures.
inline constexpr std::string_view skipped_prefix = "skipped: ";

// Ends a benchmark that cannot run here (not on this device, not with this
// build), saying why; a skip, not a failure.
template <class State = benchmark::State>
void skip(State& state, const std::string& why) {
  if constexpr (requires { state.SkipWithMessage(why); }) {
    state.SkipWithMessage(why);
  } else {
    state.SkipWithError((std::string{skipped_prefix} + why).c_str());
  }
}

// Registers a benchmark that calls body(state, args...), so that an exception
// ends that benchmark only: skipped when the device cannot do what it measures
// (syncmem::unsupported_error), failed with the message otherwise; the
// other benchmarks still run.
template <class F, class... Args>
benchmark::internal::Benchmark* register_benchmark(const std::string& name, F body, Args... args) {
  return benchmark::RegisterBenchmark(name.c_str(), [body, args...](benchmark::State& state) {
    try {
      body(state, args...);
    } catch (const unsupported_error& e) {
      skip(state, e.what());
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
    }
  });
}

// "512B", "64KiB", "16MiB", "1GiB".
[[nodiscard]] std::string size_name(std::size_t bytes);

// Between benchmarks. Each benchmark must give back the device memory it
// took, so that the next one starts on a device that holds nothing of it;
// `syncmem bench` measures each device before the first benchmark and after
// each one, and fails a benchmark that left memory behind.
struct device_memory_use {
  device_id device;
  std::size_t used_bytes = 0;
  bool whole_device = true;  // counted over the device, every process's memory in it
};

// Empties what syncmem and the alternatives cache process-wide (each device's
// default resource; on CUDA the default stream-ordered pool and graph memory),
// then returns the memory in use on every device: on a GPU, this process's
// (NVML's count) where the driver says, else the whole device's.
[[nodiscard]] std::vector<device_memory_use> release_cached_memory();

// What a benchmark may leave on `device` without counting as a leak: nothing
// on an emulated device, whose count is exact; on a GPU the driver's own state
// made on first use (kernel modules loaded lazily, library handles), which
// comes in pages of 2 MiB.
[[nodiscard]] std::size_t leak_allowance(device_id device);

// Device memory a suite keeps on purpose until the process ends (NCCL's
// communicators), made inside one benchmark: the check counts it as kept,
// not left behind.
void keep_device_memory(device_id device, std::size_t bytes);

// A suite's own caches that outlive its benchmarks (pools it shares between
// them): release_cached_memory() calls `release` first.
void add_release_hook(std::function<void()> release);

// Each suite, and all of them.
void register_transfer_suite(const options& o);
void register_allocator_suite(const options& o);
void register_allocator_fit_suite(const options& o);
void register_synced_memory_suite(const options& o);
void register_memcpy_suite(const options& o);
void register_tensor_suite(const options& o);
void register_batch_suite(const options& o);
void register_graph_suite(const options& o);
// bench/nccl (built where syncmem::nccl is): all-reduce beside raw NCCL.
void register_nccl_suite(const options& o);
void register_all(const options& o);

// The leak check's own test: with SYNCMEM_BENCH_LEAK_MB=N set, register_all
// adds selftest/leak/syncmem/<N>MiB before every suite, which allocates N MiB on the device and
// never frees it, so that a test can see `syncmem bench` report it.
void register_leak_selftest(const options& o);

}  // namespace syncmem::bench
