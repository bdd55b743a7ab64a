#include "bench_results.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>

#include <fmt/format.h>

namespace syncmem::tool {
namespace {

void push_unique(std::vector<std::string>& list, const std::string& value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

std::string describe_gpu(const nlohmann::json& machine, const std::string& id) {
  if (!machine.is_object() || !machine.contains("devices") || !machine["devices"].is_array()) return id;
  for (const auto& d : machine["devices"]) {
    if (d.value("id", std::string{}) != id) continue;
    std::string out = id;
    if (d.contains("name") && d["name"].is_string()) out += ", " + d["name"].get<std::string>();
    if (d.contains("link") && d["link"].is_string()) out += ", " + d["link"].get<std::string>();
    return out;
  }
  return id;
}

}  // namespace

bench_name parse_bench_name(std::string_view name) {
  bench_name out;
  std::string* parts[] = {&out.suite, &out.case_name, &out.method};
  for (std::string* part : parts) {
    const auto slash = name.find('/');
    if (slash == std::string_view::npos) {
      *part = std::string{name};
      return out;
    }
    *part = std::string{name.substr(0, slash)};
    name.remove_prefix(slash + 1);
  }
  out.parameter = std::string{name};
  return out;
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::uint64_t number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc{} || end == text.data()) return std::nullopt;
  const std::string_view unit{end, static_cast<std::size_t>(text.data() + text.size() - end)};
  static constexpr std::array<std::pair<std::string_view, unsigned>, 5> units{
      {{"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}}};
  for (const auto& [suffix, shift] : units) {
    if (unit != suffix) continue;
    if (number > (std::numeric_limits<std::uint64_t>::max() >> shift)) return std::nullopt;
    return number << shift;
  }
  return std::nullopt;
}

namespace {
constexpr std::string_view our_names[] = {"syncmem", "engine", "caching", "synced"};
}  // namespace

bool is_our_method(std::string_view method) {
  for (const std::string_view ours : our_names) {
    if (method == ours) return true;
    if (method.size() > ours.size() && method.starts_with(ours) &&
        (method[ours.size()] == '-' || method[ours.size()] == '_')) {
      return true;
    }
  }
  return false;
}

std::string mode_of(std::string_view method) {
  for (const std::string_view ours : our_names) {
    if (method.size() > ours.size() && method.starts_with(ours) && method[ours.size()] == '_') {
      return std::string{ours};
    }
  }
  return {};
}

std::string figures_source(const bench_results& results) {
  const std::string devices = fmt::format("{}", fmt::join(results.devices, ", "));
  if (results.gpu) {
    std::vector<std::string> described;
    for (const auto& id : results.devices) described.push_back(describe_gpu(results.machine, id));
    return fmt::format("GPU figures, measured on {}.", fmt::join(described, "; "));
  }
  std::string why;
  if (results.machine.is_object() && results.machine.contains("no_devices") &&
      results.machine["no_devices"].contains("cuda") && results.machine["no_devices"]["cuda"].is_string()) {
    why = fmt::format(" ({})", results.machine["no_devices"]["cuda"].get<std::string>());
  }
  return fmt::format(
      "Not GPU figures: no GPU was used{}. The suites ran on the host and on {}, an emulated device made of host "
      "memory and worker threads; they show syncmem's own overhead, not what a GPU or its bus can do.",
      why, devices.empty() ? std::string{"an emulated device"} : devices);
}

std::string figures_reminder(const bench_results& results) {
  return results.gpu ? std::string{}
                     : std::string{"Not GPU figures (see the top): syncmem's own overhead on an emulated device."};
}

std::string build_warning(const bench_results& results) {
  const auto& m = results.machine;
  if (!m.is_object() || !m.contains("build_type") || !m["build_type"].is_string()) return {};
  const auto type = m["build_type"].get<std::string>();
  if (type == "Release" || type == "RelWithDebInfo" || type == "MinSizeRel") return {};
  return fmt::format("syncmem was built as {}, without optimisation: its figures are slower than a Release build's.",
                     type.empty() ? std::string{"an unnamed build type"} : type);
}

const bench_run* bench_case::find(const std::string& method, const std::string& parameter) const {
  const auto it = runs.find({method, parameter});
  return it == runs.end() ? nullptr : it->second;
}

bool bench_case::is_ours(const std::string& method) const {
  // Results saved before modes counted as ours say "ours": false for them.
  if (is_our_method(method)) return true;
  for (const auto& [key, run] : runs) {
    if (key.first == method) return run->ours;
  }
  return false;
}

std::vector<std::string> bench_case::our_methods() const {
  std::vector<std::string> out;
  for (const auto& m : methods) {
    if (is_ours(m) && mode_of(m).empty()) out.push_back(m);
  }
  return out;
}

std::vector<std::string> bench_case::modes() const {
  std::vector<std::string> out;
  for (const auto& m : methods) {
    if (is_ours(m) && !mode_of(m).empty()) out.push_back(m);
  }
  return out;
}

std::vector<std::string> bench_case::alternatives() const {
  std::vector<std::string> out;
  for (const auto& m : methods) {
    if (!is_ours(m)) out.push_back(m);
  }
  return out;
}

std::optional<double> bench_case::figure(const bench_run& run) const {
  if (!run.error.empty()) return std::nullopt;
  if (bandwidth) return run.bytes_per_second;
  if (const auto it = run.counters.find("ns_per_op"); it != run.counters.end() && it->second > 0) return it->second;
  if (run.real_time_ns <= 0) return std::nullopt;
  return run.real_time_ns;
}

bool bench_case::rough(const bench_run& run) const {
  if (!run.error.empty() || run.iterations >= rough_below_iterations) return false;
  return bandwidth || !run.counters.contains("ns_per_op");  // a counted operation is one of many
}

bool bench_case::within_spread(const std::string& ours, const std::string& other, const std::string& parameter) const {
  const auto a = spread.find({ours, parameter});
  const bench_run* b_run = baseline(other, parameter);
  if (a == spread.end() || b_run == nullptr) return false;
  const auto b = spread.find({other, b_run->parameter});
  if (b == spread.end()) return false;
  return a->second.first <= b->second.second && b->second.first <= a->second.second;
}

std::vector<std::string> bench_case::parameters_of(const std::string& method) const {
  std::vector<std::string> out;
  for (const auto& p : parameters) {
    if (find(method, p) != nullptr) out.push_back(p);
  }
  return out;
}

const bench_run* bench_case::baseline(const std::string& other, const std::string& parameter) const {
  if (const bench_run* r = find(other, parameter)) return r;
  const auto mine = parameters_of(other);
  if (mine.size() == 1 && !parse_size(mine.front())) return find(other, mine.front());
  return nullptr;
}

bool bench_case::sparse() const {
  if (methods.size() < 2) return false;
  for (const auto& p : parameters) {
    int ran = 0;
    for (const auto& m : methods) ran += find(m, p) != nullptr ? 1 : 0;
    if (ran >= 2) return false;
  }
  return true;
}

std::optional<double> bench_case::speedup(const std::string& ours, const std::string& other,
                                          const std::string& parameter) const {
  const bench_run* a = find(ours, parameter);
  const bench_run* b = baseline(other, parameter);
  if (a == nullptr || b == nullptr) return std::nullopt;
  const auto fa = figure(*a);
  const auto fb = figure(*b);
  if (!fa || !fb || *fa <= 0 || *fb <= 0) return std::nullopt;
  return bandwidth ? *fa / *fb : *fb / *fa;  // a bandwidth is better higher, a time lower
}

std::vector<bench_case> group_cases(const bench_results& results) {
  std::vector<bench_case> cases;
  std::map<std::pair<std::string, std::string>,
           std::map<std::pair<std::string, std::string>, std::vector<const bench_run*>>>
      repeated;
  auto case_for = [&cases](const bench_run& r) -> bench_case& {
    for (auto& c : cases) {
      if (c.suite == r.suite && c.case_name == r.case_name) return c;
    }
    cases.push_back(bench_case{r.suite, r.case_name, {}, {}, {}, false, false, {}, {}});
    return cases.back();
  };
  for (const auto& r : results.runs) {
    bench_case& c = case_for(r);
    push_unique(c.methods, r.method);
    push_unique(c.parameters, r.parameter);
    for (const auto& [counter, value] : r.counters) push_unique(c.counters, counter);
    repeated[{r.suite, r.case_name}][{r.method, r.parameter}].push_back(&r);
  }
  for (auto& c : cases) {
    for (auto& [key, list] : repeated[{c.suite, c.case_name}]) {
      std::vector<const bench_run*> ok;
      for (const auto* r : list) {
        if (r->error.empty()) ok.push_back(r);
      }
      if (ok.empty()) {
        c.runs[key] = list.front();
        continue;
      }
      std::sort(ok.begin(), ok.end(), [](const auto* a, const auto* b) { return a->real_time_ns < b->real_time_ns; });
      c.runs[key] = ok[ok.size() / 2];
    }
    // Ours first, each group in order of appearance.
    std::stable_partition(c.methods.begin(), c.methods.end(), [&c](const std::string& m) { return c.is_ours(m); });
    c.sizes = std::all_of(c.parameters.begin(), c.parameters.end(),
                          [](const std::string& p) { return parse_size(p).has_value(); });
    if (c.sizes) {
      std::stable_sort(c.parameters.begin(), c.parameters.end(),
                       [](const std::string& a, const std::string& b) { return *parse_size(a) < *parse_size(b); });
    }
    bool any = false;
    bool all = true;
    for (const auto& [key, r] : c.runs) {
      if (!r->error.empty()) continue;
      any = true;
      all = all && r->bytes_per_second.has_value() && *r->bytes_per_second > 0;
    }
    c.bandwidth = any && all;
    // With several rounds, the range of each figure.
    for (const auto& [key, list] : repeated[{c.suite, c.case_name}]) {
      if (list.size() < 2) continue;
      std::optional<std::pair<double, double>> range;
      for (const auto* r : list) {
        const auto f = c.figure(*r);
        if (!f) continue;
        range = range ? std::pair{std::min(range->first, *f), std::max(range->second, *f)} : std::pair{*f, *f};
      }
      if (range) c.spread[key] = *range;
    }
  }
  return cases;
}

}  // namespace syncmem::tool
