#pragma once

// Allocation traces the replay benchmark runs: two generated in code
// (deterministic, sized to the device), and any recorded by
// mr::logging_adaptor (files named in SYNCMEM_BENCH_TRACES).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "syncmem/mr/logging_adaptor.hpp"

namespace syncmem::bench {

// One step of a trace: allocate `size` bytes into `slot`, or free the slot.
struct trace_op {
  std::uint32_t slot = 0;
  bool allocate = true;
  std::size_t size = 0;  // also given with the free, as deallocate needs it
};

struct allocation_trace {
  std::string name;  // the benchmark parameter: "training", "mixed", or a file's stem
  std::uint32_t slots = 0;
  std::vector<trace_op> ops;
  [[nodiscard]] std::size_t peak_requested() const;  // the most bytes live at once
};

// A training-like loop: persistent weights, activations kept through the
// forward pass and freed in the backward pass, gradients and temporaries;
// the batch size changes every few iterations among 16..64. Scaled so that
// its peak is a fraction of `device_memory`.
[[nodiscard]] allocation_trace training_trace(std::size_t device_memory, bool quick);

// Random churn over 256 slots, half small (256 B..1 MiB) and half large
// (1 MiB..256 MiB, scaled down on small devices), sizes log-uniform.
[[nodiscard]] allocation_trace mixed_trace(std::size_t device_memory, bool quick);

// A trace recorded by mr::logging_adaptor: pointers become slots; frees of
// unknown pointers and failed allocations are dropped; what is still live at
// the end is freed.
[[nodiscard]] allocation_trace from_events(std::string name, const std::vector<mr::trace_event>& events);

}  // namespace syncmem::bench
