#include "allocator_traces.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>

namespace syncmem::bench {

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = KiB * KiB;

// Device memory relative to an 80 GiB GPU, which the traces are written for.
double scale_for(std::size_t device_memory) {
  const double f = static_cast<double>(device_memory) / static_cast<double>(std::size_t{80} << 30);
  return std::clamp(f, 1.0 / 1024, 1.0);
}

std::size_t scaled(std::size_t bytes, double f) {
  const auto s = static_cast<std::size_t>(static_cast<double>(bytes) * f);
  return std::max<std::size_t>(256, s / 256 * 256);
}

// Hands out slots and records allocate/free steps.
class recorder {
 public:
  explicit recorder(allocation_trace& t) : t_{t} {}
  std::uint32_t allocate(std::size_t size) {
    std::uint32_t slot = 0;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = t_.slots++;
      sizes_.push_back(0);
    }
    sizes_[slot] = size;
    t_.ops.push_back({slot, true, size});
    return slot;
  }
  void free(std::uint32_t slot) {
    t_.ops.push_back({slot, false, sizes_[slot]});
    free_.push_back(slot);
  }

 private:
  allocation_trace& t_;
  std::vector<std::size_t> sizes_;
  std::vector<std::uint32_t> free_;
};

}  // namespace

std::size_t allocation_trace::peak_requested() const {
  std::size_t live = 0;
  std::size_t peak = 0;
  for (const auto& op : ops) {
    live = op.allocate ? live + op.size : live - op.size;
    peak = std::max(peak, live);
  }
  return peak;
}

allocation_trace training_trace(std::size_t device_memory, bool quick) {
  const double f = scale_for(device_memory);
  allocation_trace t;
  t.name = "training";
  recorder r{t};
  std::mt19937_64 random{20261120};
  constexpr int layers = 24;
  const int iterations = quick ? 12 : 60;
  const std::size_t weight = scaled(16 * MiB, f);
  const std::size_t per_sample = scaled(static_cast<std::size_t>(1.5 * MiB), f);
  const std::size_t batches[] = {16, 24, 32, 48, 64};
  std::vector<std::uint32_t> weights;
  for (int l = 0; l < layers; ++l) weights.push_back(r.allocate(weight));
  std::size_t batch = 32;
  for (int it = 0; it < iterations; ++it) {
    if (it % 6 == 0) batch = batches[random() % 5];
    const std::size_t act = batch * per_sample;
    std::vector<std::uint32_t> activations;
    for (int l = 0; l < layers; ++l) {
      activations.push_back(r.allocate(act));
      const auto workspace = r.allocate(act / 2 / 256 * 256 + 256);
      const auto small = r.allocate(256 + random() % (64 * KiB));
      r.free(small);
      r.free(workspace);
    }
    const auto loss = r.allocate(batch * 4 * KiB);
    auto grad = r.allocate(act);
    std::vector<std::uint32_t> weight_grads;
    for (int l = layers - 1; l >= 0; --l) {
      const auto grad_in = r.allocate(act);
      weight_grads.push_back(r.allocate(weight));
      const auto workspace = r.allocate(act / 2 / 256 * 256 + 256);
      r.free(workspace);
      r.free(grad);
      r.free(activations[static_cast<std::size_t>(l)]);
      grad = grad_in;
    }
    r.free(grad);
    r.free(loss);
    for (auto g : weight_grads) {
      const auto step = r.allocate(weight);  // the optimizer's temporary
      r.free(step);
      r.free(g);
    }
  }
  for (auto w : weights) r.free(w);
  return t;
}

allocation_trace mixed_trace(std::size_t device_memory, bool quick) {
  const double f = scale_for(device_memory);
  allocation_trace t;
  t.name = "mixed";
  t.slots = 256;
  std::mt19937_64 random{1120};
  const double large_max = std::max(2.0 * MiB, 256.0 * MiB * f);
  std::uniform_real_distribution<double> unit{0.0, 1.0};
  auto log_uniform = [&](double low, double high) {
    return std::exp(std::log(low) + unit(random) * (std::log(high) - std::log(low)));
  };
  std::vector<std::size_t> live(t.slots, 0);
  const int steps = quick ? 2000 : 40000;
  for (int i = 0; i < steps; ++i) {
    const auto slot = static_cast<std::uint32_t>(random() % t.slots);
    if (live[slot] != 0) {
      t.ops.push_back({slot, false, live[slot]});
      live[slot] = 0;
    } else {
      const double bytes = random() % 2 == 0 ? log_uniform(256, 1.0 * MiB) : log_uniform(1.0 * MiB, large_max);
      live[slot] = static_cast<std::size_t>(bytes);
      t.ops.push_back({slot, true, live[slot]});
    }
  }
  for (std::uint32_t slot = 0; slot < t.slots; ++slot) {
    if (live[slot] != 0) t.ops.push_back({slot, false, live[slot]});
  }
  return t;
}

allocation_trace from_events(std::string name, const std::vector<mr::trace_event>& events) {
  allocation_trace t;
  t.name = std::move(name);
  recorder r{t};
  std::unordered_map<std::uintptr_t, std::uint32_t> slots;
  for (const auto& e : events) {
    if (e.action == mr::trace_action::allocate) {
      slots[e.pointer] = r.allocate(e.size);
    } else if (e.action == mr::trace_action::free) {
      auto it = slots.find(e.pointer);
      if (it == slots.end()) continue;
      r.free(it->second);
      slots.erase(it);
    }
  }
  for (const auto& [pointer, slot] : slots) r.free(slot);
  return t;
}

}  // namespace syncmem::bench
