#include "allocator_traces.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "bench.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"

namespace syncmem::bench {

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = KiB * KiB;
constexpr std::string_view replay_format_line = "# syncmem.replay/1";

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

allocation_trace synthetic_trace(std::size_t device_memory, bool quick) {
  const double f = scale_for(device_memory);
  allocation_trace t;
  t.name = "synthetic";
  recorder r{t};
  std::mt19937_64 random{29};
  std::uniform_real_distribution<double> unit{0.0, 1.0};
  const double low = 256.0;
  const double high = std::max(4.0 * MiB, 256.0 * MiB * f);
  const auto live_target = static_cast<std::size_t>(8.0 * 1024 * MiB * f);
  auto next_size = [&] {
    return static_cast<std::size_t>(std::exp(std::log(low) + unit(random) * (std::log(high) - std::log(low))));
  };
  std::vector<std::pair<std::uint32_t, std::size_t>> live;
  std::size_t live_bytes = 0;
  std::size_t next = next_size();
  const std::size_t steps = quick ? 20'000 : 200'000;
  while (t.ops.size() < steps) {
    if (live_bytes + next <= live_target || live.empty()) {
      live.emplace_back(r.allocate(next), next);
      live_bytes += next;
      next = next_size();
    } else {
      const std::size_t i = random() % live.size();
      r.free(live[i].first);
      live_bytes -= live[i].second;
      live[i] = live.back();
      live.pop_back();
    }
  }
  for (const auto& [slot, bytes] : live) r.free(slot);
  return t;
}

allocation_trace read_replay_trace(std::string name, std::istream& in) {
  allocation_trace t;
  t.name = std::move(name);
  std::vector<std::size_t> sizes;
  std::string line;
  std::size_t number = 0;
  auto fail = [&](std::string_view what) {
    SYNCMEM_FAIL(fmt::format("replay trace '{}', line {}: {} (\"{}\")", t.name, number, what, line));
  };
  auto parse = [&](std::string_view text, auto& value) {
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size()) fail("expected a number");
  };
  bool header = false;
  while (std::getline(in, line)) {
    ++number;
    if (number == 1) {
      if (line != replay_format_line) fail(fmt::format("the first line must be \"{}\"", replay_format_line));
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const std::string_view text{line};
    if (!header) {
      std::uint32_t slots = 0;
      std::size_t ops = 0;
      const auto ops_at = text.find(" ops ");
      if (!text.starts_with("slots ") || ops_at == std::string_view::npos) fail("expected \"slots N ops M\"");
      parse(text.substr(6, ops_at - 6), slots);
      parse(text.substr(ops_at + 5), ops);
      t.slots = slots;
      sizes.assign(slots, 0);
      t.ops.reserve(ops);
      header = true;
      continue;
    }
    std::uint32_t slot = 0;
    if (text[0] == '+') {
      const auto space = text.find(' ');
      if (space == std::string_view::npos) fail("expected \"+slot size\"");
      std::size_t size = 0;
      parse(text.substr(1, space - 1), slot);
      parse(text.substr(space + 1), size);
      if (slot >= t.slots) fail(fmt::format("slot {} is past the {} slots declared", slot, t.slots));
      if (sizes[slot] != 0) fail(fmt::format("slot {} is allocated twice", slot));
      if (size == 0) fail("an allocation of 0 bytes");
      sizes[slot] = size;
      t.ops.push_back({slot, true, size});
    } else if (text[0] == '-') {
      parse(text.substr(1), slot);
      if (slot >= t.slots || sizes[slot] == 0) fail(fmt::format("slot {} is freed but not allocated", slot));
      t.ops.push_back({slot, false, sizes[slot]});
      sizes[slot] = 0;
    } else {
      fail("expected \"+slot size\" or \"-slot\"");
    }
  }
  if (!header) fail("no \"slots N ops M\" line");
  for (std::uint32_t slot = 0; slot < t.slots; ++slot) {
    if (sizes[slot] != 0) t.ops.push_back({slot, false, sizes[slot]});
  }
  return t;
}

allocation_trace load_trace_file(const std::string& path) {
  std::ifstream in{path};
  SYNCMEM_EXPECTS(in.good(), fmt::format("allocation trace '{}' cannot be opened", path));
  std::string first;
  std::getline(in, first);
  auto stem = std::filesystem::path{path}.stem().string();
  if (first == replay_format_line) {
    in.seekg(0);
    return read_replay_trace(std::move(stem), in);
  }
  return from_events(std::move(stem), mr::logging_adaptor::read_trace_file(path));
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

std::vector<std::shared_ptr<const allocation_trace>> traces_for(const options& o) {
  const auto memory = get_memory_info(o.first()).total;
  std::vector<std::shared_ptr<const allocation_trace>> traces;
  traces.push_back(std::make_shared<const allocation_trace>(training_trace(memory, o.quick)));
  traces.push_back(std::make_shared<const allocation_trace>(mixed_trace(memory, o.quick)));
  traces.push_back(std::make_shared<const allocation_trace>(synthetic_trace(memory, o.quick)));
  for (auto& t : recorded_traces(o)) traces.push_back(std::move(t));
  return traces;
}

std::vector<std::shared_ptr<const allocation_trace>> recorded_traces([[maybe_unused]] const options& o) {
  std::vector<std::shared_ptr<const allocation_trace>> traces;
  std::vector<std::string> files;
#ifdef SYNCMEM_BENCH_TRACE_DIR
  if (!o.quick && std::filesystem::is_directory(SYNCMEM_BENCH_TRACE_DIR)) {
    for (const auto& entry : std::filesystem::directory_iterator{SYNCMEM_BENCH_TRACE_DIR}) {
      if (entry.path().extension() == ".replay") files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
  }
#endif
  if (const char* list = std::getenv("SYNCMEM_BENCH_TRACES"); list != nullptr && *list != '\0') {
    std::stringstream names{list};
    std::string path;
    while (std::getline(names, path, ',')) {
      if (!path.empty()) files.push_back(path);
    }
  }
  for (const auto& path : files) traces.push_back(std::make_shared<const allocation_trace>(load_trace_file(path)));
  return traces;
}

}  // namespace syncmem::bench
