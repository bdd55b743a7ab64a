// The host reference, on every machine: copying pageable host memory with
// std::memcpy, beside the same copy enqueued on a syncmem stream of the
// benchmark device and waited for (cudaMemcpyAsync on a GPU, a worker thread on
// an emulated device). It gives every report a bandwidth curve of the host's
// own memory to read the other figures against, and shows what a stream round
// trip costs for small copies.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "bench.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::bench {
namespace {

constexpr std::size_t kib = std::size_t{1} << 10;
constexpr std::size_t mib = std::size_t{1} << 20;

// Both buffers are written before the loop, so that first-touch page faults
// are not measured.
struct host_buffers {
  explicit host_buffers(std::size_t bytes) : src(bytes), dst(bytes) {
    for (std::size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
    std::memset(dst.data(), 0, bytes);
  }
  [[nodiscard]] bool equal() const { return std::memcmp(src.data(), dst.data(), src.size()) == 0; }
  std::vector<unsigned char> src;
  std::vector<unsigned char> dst;
};

void finish(benchmark::State& state, const host_buffers& b) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(b.src.size()));
  if (!b.equal()) state.SkipWithError("the copy produced wrong bytes");
}

void std_memcpy(benchmark::State& state, std::size_t bytes) {
  host_buffers b{bytes};
  for (auto _ : state) {
    std::memcpy(b.dst.data(), b.src.data(), bytes);
    benchmark::ClobberMemory();
  }
  finish(state, b);
}

void stream_copy(benchmark::State& state, std::size_t bytes, device_id device) {
  host_buffers b{bytes};
  const device_guard guard{device};
  const stream s{device};
  auto& backend = detail::backend_for(device);
  for (auto _ : state) {
    backend.memcpy_async(b.dst.data(), b.src.data(), bytes, device.index(), s.view().handle());
    s.synchronize();
  }
  finish(state, b);
}

}  // namespace

void register_memcpy_suite(const options& o) {
  const std::vector<std::size_t> sizes = o.quick ? std::vector<std::size_t>{4 * kib, 256 * kib, 16 * mib}
                                                 : std::vector<std::size_t>{4 * kib, 16 * kib, 64 * kib, 256 * kib, mib,
                                                                            4 * mib, 16 * mib, 64 * mib, 256 * mib};
  const device_id device = o.first();
  for (const std::size_t bytes : sizes) {
    const auto size = size_name(bytes);
    register_benchmark(fmt::format("memcpy/h2h/syncmem-stream/{}", size).c_str(),
                       [bytes, device](benchmark::State& s) { stream_copy(s, bytes, device); })
        ->UseRealTime()
        ->MinTime(o.min_time());
    register_benchmark(fmt::format("memcpy/h2h/std::memcpy/{}", size).c_str(),
                       [bytes](benchmark::State& s) { std_memcpy(s, bytes); })
        ->UseRealTime()
        ->MinTime(o.min_time());
  }
}

}  // namespace syncmem::bench
