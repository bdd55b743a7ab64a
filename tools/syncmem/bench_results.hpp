#pragma once

// What `syncmem bench` measured, independent of Google Benchmark: the runs
// with their names taken apart (bench/bench.hpp: <suite>/<case>/<method>/
// <parameter>), and the same runs grouped into cases for the table and the
// page. Written to and read from JSON by report_json.hpp.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace syncmem::tool {

// One benchmark run.
struct bench_run {
  std::string name;  // as Google Benchmark names it
  std::string suite;
  std::string case_name;
  std::string method;
  std::string parameter;
  std::optional<std::uint64_t> bytes;  // the parameter, when it is a size
  bool ours = false;                   // syncmem's figure (else an alternative)
  std::int64_t iterations = 0;
  std::int64_t threads = 1;
  double real_time_ns = 0;  // per iteration (manual time where the benchmark measures with events)
  double cpu_time_ns = 0;   // per iteration
  std::optional<double> bytes_per_second;
  std::optional<double> items_per_second;
  std::map<std::string, double> counters;  // user counters, e.g. peak_ratio
  std::string label;                       // the benchmark's own label, if any
  std::string error;                       // why the run failed; empty when it did not
};

// A whole `syncmem bench` session.
struct bench_results {
  std::string date;  // UTC, ISO 8601
  double duration_s = 0;
  bool quick = false;
  int rounds = 1;  // how many times every benchmark ran, one round after another (--rounds)
  std::string filter;
  bool gpu = false;                  // whether the figures come from a GPU
  std::vector<std::string> devices;  // the devices the suites ran on
  nlohmann::json machine;            // describe_machine()
  nlohmann::json context;            // what Google Benchmark saw of the host
  std::vector<bench_run> runs;
};

// The parts of a benchmark name. Missing parts are empty; a parameter may
// itself contain '/'.
struct bench_name {
  std::string suite, case_name, method, parameter;
};
[[nodiscard]] bench_name parse_bench_name(std::string_view name);

// "4KiB" -> 4096, "512B" -> 512, "1GiB"; nullopt for anything else ("8threads").
[[nodiscard]] std::optional<std::uint64_t> parse_size(std::string_view text);

// Whether a method is syncmem's own (bench/bench.hpp says which names are).
[[nodiscard]] bool is_our_method(std::string_view method);

// The method that `method` is a mode of: "caching_expandable" is "caching"
// with other options. Empty when `method` is no mode. The report shows modes
// beside their method in a table of their own, not as alternatives.
[[nodiscard]] std::string mode_of(std::string_view method);

// Fewer iterations than this, and a figure is marked rough in the report.
inline constexpr std::int64_t rough_below_iterations = 10;

// Where the figures come from, in one sentence for the top of the table and
// the page. When they are not GPU figures it says so plainly.
[[nodiscard]] std::string figures_source(const bench_results& results);
// The same in a line, for under the tables; empty for GPU figures.
[[nodiscard]] std::string figures_reminder(const bench_results& results);

// A warning when the library was built without optimisation (a Debug or
// sanitizer build), whose figures say little; empty otherwise.
[[nodiscard]] std::string build_warning(const bench_results& results);

// One case (<suite>/<case>): its methods (ours first) and parameters (by size
// when they are sizes), and the run for each pair.
struct bench_case {
  std::string suite;
  std::string case_name;
  std::vector<std::string> methods;
  std::vector<std::string> parameters;
  std::vector<std::string> counters;  // user counter names seen in the case
  bool bandwidth = false;             // figures are bandwidths (else time per iteration)
  bool sizes = false;                 // every parameter is a size
  std::map<std::pair<std::string, std::string>, const bench_run*> runs;  // (method, parameter)
  // With several rounds: the lowest and highest figure of each (method, parameter).
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> spread;

  [[nodiscard]] std::string title() const { return suite + "/" + case_name; }
  [[nodiscard]] const bench_run* find(const std::string& method, const std::string& parameter) const;
  [[nodiscard]] bool is_ours(const std::string& method) const;
  // Ours, but not the modes of ours.
  [[nodiscard]] std::vector<std::string> our_methods() const;
  // Modes of our methods (mode_of), in order.
  [[nodiscard]] std::vector<std::string> modes() const;
  [[nodiscard]] std::vector<std::string> alternatives() const;
  // The figure of a run in this case (bandwidth, or time per operation: the
  // ns_per_op counter where the run counts its own operations, as a replay of
  // a whole trace does, else the time per iteration), nullopt for a failed run.
  [[nodiscard]] std::optional<double> figure(const bench_run& run) const;
  // Whether the figure of a run rests on too few iterations to mean much.
  [[nodiscard]] bool rough(const bench_run& run) const;
  // Whether the rounds of `ours` and `other` at `parameter` overlap, so that
  // their ratio is within the spread of the measurements.
  [[nodiscard]] bool within_spread(const std::string& ours, const std::string& other,
                                   const std::string& parameter) const;
  // The run `other` is compared with at `parameter`: its own run there, or,
  // when `other` ran once with a parameter that is not a size (a baseline
  // such as "raw-pointer/any"), that one run.
  [[nodiscard]] const bench_run* baseline(const std::string& other, const std::string& parameter) const;
  // How many times faster `ours` is than `other` at `parameter`, when both ran.
  [[nodiscard]] std::optional<double> speedup(const std::string& ours, const std::string& other,
                                              const std::string& parameter) const;
  // Whether no parameter ran with two methods (each method measured its own
  // situation): the case reads better as one row per run.
  [[nodiscard]] bool sparse() const;
  // The parameters `method` ran with, in the case's order.
  [[nodiscard]] std::vector<std::string> parameters_of(const std::string& method) const;
};

// The cases in the order their first run appears. When a name ran more than
// once (repetitions), the run with the median time stands for it.
[[nodiscard]] std::vector<bench_case> group_cases(const bench_results& results);

}  // namespace syncmem::tool
