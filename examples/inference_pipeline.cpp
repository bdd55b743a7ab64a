// An inference-style pipeline: upload a batch, run a kernel on it, download the
// result, batch after batch, with two streams and double buffering so that
// copies of one batch overlap the computation of the other. Prints how much of
// the copying the overlap hid.
//
//   inference_pipeline [batches] [MiB per batch]
//
// Runs on the first CUDA device, or on an emulated device when there is none
// (SYNCMEM_EMULATED_DEVICES=1).

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "common/example_kernels.hpp"
#include "syncmem/synced_memory.hpp"
#include "syncmem/syncmem.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

constexpr float scale = 0.75F;

struct batch_buffers {
  syncmem::synced_memory input;
  syncmem::synced_memory output;
};

// Each batch's input differs from the base input in its first element only,
// so that the host's own work stays small and the copies carry the weight.
float expected(const std::vector<float>& base, std::size_t i, int batch, int rounds) {
  const float x = i == 0 ? static_cast<float>(batch) : base[i];
  return examples::transform_one(x, scale, 0.25F, rounds);
}

bool close(float a, float b) { return std::fabs(a - b) <= 1e-5F * std::max(1.0F, std::fabs(b)); }

}  // namespace

int main(int argc, char** argv) try {
  if (syncmem::device_count() == 0) {
    std::fprintf(stderr, "inference_pipeline: no device; set SYNCMEM_EMULATED_DEVICES=1 to run without a GPU\n");
    return 2;
  }
  const auto device = syncmem::current_device();
  const bool gpu = device.kind() == syncmem::device_kind::cuda;
  const int batches = argc > 1 ? std::max(2, std::atoi(argv[1])) : 16;
  const double mib = argc > 2 ? std::max(0.01, std::atof(argv[2])) : (gpu ? 16.0 : 1.0);
  const auto n = static_cast<std::size_t>(mib * (1 << 20)) / sizeof(float);
  const std::size_t bytes = n * sizeof(float);

  std::vector<float> base(n);
  std::mt19937 random{std::random_device{}()};
  std::uniform_real_distribution<float> pick{-2.0F, 2.0F};
  for (auto& x : base) x = pick(random);

  std::array<syncmem::stream, 2> streams{syncmem::stream{device}, syncmem::stream{device}};
  auto make = [&](const char* label) { return syncmem::synced_memory{bytes, device, {.label = label}}; };
  std::array<batch_buffers, 2> buffers{batch_buffers{make("input 0"), make("output 0")},
                                       batch_buffers{make("input 1"), make("output 1")}};
  for (auto& b : buffers) {
    std::copy(base.begin(), base.end(), static_cast<float*>(b.input.mutable_host_data()));
    (void)b.output.mutable_host_data();
    (void)b.output.device_data(streams[0]);
  }
  streams[0].synchronize();

  // Copies alone: upload and download every batch on one stream, no kernel.
  auto t = clock_type::now();
  for (int i = 0; i < batches; ++i) {
    auto& b = buffers[static_cast<std::size_t>(i % 2)];
    static_cast<float*>(b.input.mutable_host_data())[0] = static_cast<float>(i);
    (void)b.input.device_data(streams[0]);
    (void)b.output.mutable_device_data(streams[0]);
    (void)b.output.host_data();
  }
  const double copy_ms = ms_since(t);

  // Compute alone, on device-resident data; pick the rounds so that a batch
  // computes about as long as its copies take.
  auto compute_ms_for = [&](int rounds) {
    auto& b = buffers[0];
    const auto* x = static_cast<const float*>(b.input.device_data(streams[0]));
    auto* y = static_cast<float*>(b.output.mutable_device_data(streams[0]));
    streams[0].synchronize();
    const auto start = clock_type::now();
    for (int i = 0; i < batches; ++i) examples::transform(streams[0], x, y, n, scale, 0.25F, rounds);
    streams[0].synchronize();
    return ms_since(start);
  };
  int rounds = 8;
  const double probe = compute_ms_for(rounds);
  rounds = std::clamp(static_cast<int>(rounds * copy_ms / std::max(probe, 1e-3)), 1, 100000);
  const double compute_ms = compute_ms_for(rounds);

  // Pipelined: batch i on stream i % 2; before a buffer is reused, its last
  // result is consumed on the host (host_data waits for exactly its download).
  int checked = 0;
  int wrong = 0;
  auto consume = [&](int batch) {
    auto& b = buffers[static_cast<std::size_t>(batch % 2)];
    const auto* y = static_cast<const float*>(b.output.host_data());
    for (std::size_t k = 0; k < 64; ++k) {
      const std::size_t i = k == 0 ? 0 : (k * 2654435761ULL) % n;
      if (!close(y[i], expected(base, i, batch, rounds))) ++wrong;
    }
    ++checked;
  };
  t = clock_type::now();
  for (int i = 0; i < batches; ++i) {
    const auto k = static_cast<std::size_t>(i % 2);
    auto& b = buffers[k];
    auto& s = streams[k];
    if (i >= 2) consume(i - 2);
    static_cast<float*>(b.input.mutable_host_data())[0] = static_cast<float>(i);
    const auto* x = static_cast<const float*>(b.input.device_data(s));  // upload on s
    auto* y = static_cast<float*>(b.output.mutable_device_data(s));
    examples::transform(s, x, y, n, scale, 0.25F, rounds);
    b.output.prefetch_to_host(s);  // download on s, not waited for
  }
  for (int i = std::max(0, batches - 2); i < batches; ++i) consume(i);
  const double pipelined_ms = ms_since(t);

  // The last two batches, every element.
  for (int i = std::max(0, batches - 2); i < batches; ++i) {
    const auto* y = static_cast<const float*>(buffers[static_cast<std::size_t>(i % 2)].output.host_data());
    for (std::size_t j = 0; j < n; ++j) {
      if (!close(y[j], expected(base, j, i, rounds))) ++wrong;
    }
  }

  const auto props = syncmem::get_device_properties(device);
  const double hidden = copy_ms + compute_ms - pipelined_ms;
  const double overlap = 100.0 * std::clamp(hidden / std::min(copy_ms, compute_ms), 0.0, 1.0);
  std::printf("inference pipeline on %s (%s): %d batches of %.2f MiB, %d round%s per element\n",
              syncmem::to_string(device).c_str(), props.name.c_str(), batches, static_cast<double>(bytes) / (1 << 20),
              rounds, rounds == 1 ? "" : "s");
  std::printf("  copies alone   %9.2f ms  (upload and download, one stream)\n", copy_ms);
  std::printf("  compute alone  %9.2f ms\n", compute_ms);
  std::printf(
      "  pipelined      %9.2f ms  (two streams, double buffering); max(copy, compute) = %.2f ms, "
      "sum = %.2f ms\n",
      pipelined_ms, std::max(copy_ms, compute_ms), copy_ms + compute_ms);
  std::printf("  overlap: %.0f%% of the shorter of copy and compute was hidden%s\n", overlap,
              gpu ? "" : " (emulated device: copies and compute share the host's cores)");
  std::printf("  results: %d batches checked, %d wrong values\n", checked, wrong);
  return wrong == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "inference_pipeline: %s\n", e.what());
  return 1;
}
