#pragma once

// Allocation traces the replay benchmark runs: three generated in code
// (deterministic, sized to the device), real ones recorded from PyTorch
// programs (bench/traces, in the replay format below), and any recorded by
// mr::logging_adaptor (files named in SYNCMEM_BENCH_TRACES).
//
// The replay format (`# syncmem.replay/1`), one step a line:
//
//     # syncmem.replay/1
//     # any number of comment lines
//     slots 559 ops 67996
//     +0 154389504        allocate 154389504 bytes into slot 0
//     -0                  free slot 0
//
// Every slot is freed by the end; bench/python/torch_workloads.py writes it.

#include <cstddef>
#include <cstdint>
#include <istream>
#include <memory>
#include <string>
#include <vector>

#include "syncmem/mr/logging_adaptor.hpp"

namespace syncmem::bench {

struct options;

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

// Random churn at a steady live size: 8 GiB live (scaled to the device),
// sizes log-uniform in 256 B..256 MiB, 200,000 steps (quick: 20,000); each
// step allocates when the next size fits under the live size, else frees a
// live block picked at random.
[[nodiscard]] allocation_trace synthetic_trace(std::size_t device_memory, bool quick);

// A trace in the replay format above, named `name`.
// @throws syncmem::logic_error naming the line and what is wrong with it
[[nodiscard]] allocation_trace read_replay_trace(std::string name, std::istream& in);

// The trace in the file at `path`, in the replay format or logging_adaptor's
// (told apart by the first line), named after the file's stem.
// @throws syncmem::logic_error when it cannot be read or parsed
[[nodiscard]] allocation_trace load_trace_file(const std::string& path);

// A trace recorded by mr::logging_adaptor: pointers become slots; frees of
// unknown pointers and failed allocations are dropped; what is still live at
// the end is freed.
[[nodiscard]] allocation_trace from_events(std::string name, const std::vector<mr::trace_event>& events);

// What the replays run on the options' first device: the generated traces
// (sized to it), the recorded ones committed in bench/traces (unpacked into
// the build tree at configure time; not in a quick run, as their size is
// fixed), and those named in SYNCMEM_BENCH_TRACES (comma-separated files in
// the replay format or written by mr::logging_adaptor).
[[nodiscard]] std::vector<std::shared_ptr<const allocation_trace>> traces_for(const options& o);
// The files among them: the recorded traces and SYNCMEM_BENCH_TRACES.
[[nodiscard]] std::vector<std::shared_ptr<const allocation_trace>> recorded_traces(const options& o);

}  // namespace syncmem::bench
