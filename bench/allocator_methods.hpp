#pragma once

// The allocators that the allocator suites (allocators.cpp, allocator_fit.cpp)
// drive, each behind one interface: syncmem's caching resource in its modes,
// cudaMalloc and cudaMallocAsync (on CUDA devices), the emulated source and
// stream-ordered pool (on emulated devices), and, where they are found,
// PyTorch's caching allocator and RAPIDS RMM's resources.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "allocator_traces.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::bench {

struct peaks {
  std::size_t reserved = 0;
  std::size_t allocated = 0;
};

// An allocator as the benchmarks drive it. allocate throws
// syncmem::out_of_memory when it cannot serve (PyTorch's and RMM's failures
// are turned into one), any other exception when something else went wrong.
class allocator_under_test {
 public:
  allocator_under_test() = default;
  allocator_under_test(const allocator_under_test&) = delete;
  allocator_under_test& operator=(const allocator_under_test&) = delete;
  virtual ~allocator_under_test() = default;
  virtual void* allocate(std::size_t bytes, stream_view s) = 0;
  virtual void deallocate(void* p, std::size_t bytes, stream_view s) = 0;
  // The peaks since it was made (replay), with what was reserved and allocated
  // counted as the allocator itself counts them.
  virtual peaks peak() = 0;
};

struct method {
  std::string name;
  // A fresh allocator; `for_replay` adds the counting that the replays need.
  std::function<std::unique_ptr<allocator_under_test>(device_id device, bool for_replay)> make;
  // A fresh allocator whose own reservations from the device stop at
  // `limit_bytes` (so that its fragmentation counts against the limit), or
  // empty where the method has no such limit.
  std::function<std::unique_ptr<allocator_under_test>(device_id device, std::size_t limit_bytes)> make_limited;
};

// Every method that runs on `device`: ours first, then the alternatives.
[[nodiscard]] std::vector<method> methods_for(device_id device);

// Runs `trace` through `a` on `s` and waits for `s`. When an allocation
// throws, frees what the trace holds and rethrows.
void replay_trace(allocator_under_test& a, const allocation_trace& trace, stream_view s);

}  // namespace syncmem::bench
