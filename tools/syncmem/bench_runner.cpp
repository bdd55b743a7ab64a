#include "bench_runner.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "bench.hpp"
#include "files.hpp"
#include "machine.hpp"
#include "report_format.hpp"
#include "syncmem/device_id.hpp"

namespace syncmem::tool {
namespace {

using report_run = benchmark::BenchmarkReporter::Run;

// The parts Google Benchmark appends to a listed name ("/min_time:0.010",
// "/real_time", "/threads:8", ...), which the runs' names leave out.
constexpr std::string_view settings[] = {
    "min_time:", "min_warmup_time:", "iterations:", "repeats:", "threads:", "real_time", "manual_time", "process_time"};

// A listed name without those parts, as the runs are named.
std::string without_settings(const std::string& listed) {
  std::string name = listed;
  for (;;) {
    const auto slash = name.rfind('/');
    if (slash == std::string::npos) return name;
    const std::string_view last{name.data() + slash + 1, name.size() - slash - 1};
    const bool setting = std::any_of(std::begin(settings), std::end(settings),
                                     [last](std::string_view s) { return last.starts_with(s); });
    if (!setting) return name;
    name.resize(slash);
  }
}

// The --filter regex as Google Benchmark applies it: to the names with the
// settings it appends, which --list and the tables leave out, so each end
// anchor `$` (outside brackets, unescaped) may follow such settings.
std::string benchmark_spec(const std::string& filter) {
  if (filter.empty()) return ".";
  static const std::string any_settings = [] {
    std::string alternatives;
    for (const std::string_view s : settings) {
      if (!alternatives.empty()) alternatives += '|';
      alternatives += s;
    }
    return "(/(" + alternatives + ")[^/]*)*";
  }();
  std::string spec;
  bool escaped = false;
  std::size_t bracket_from = std::string::npos;  // where the open bracket expression's members begin
  for (std::size_t i = 0; i < filter.size(); ++i) {
    const char c = filter[i];
    if (escaped) {
      escaped = false;
    } else if (c == '\\') {
      escaped = true;
    } else if (bracket_from != std::string::npos) {
      if (c == '^' && i == bracket_from) {
        ++bracket_from;  // "[^]...]": the ']' right after is a member too
      } else if (c == ']' && i != bracket_from) {
        bracket_from = std::string::npos;
      }
    } else if (c == '[') {
      bracket_from = i + 1;
    } else if (c == '$') {
      spec += any_settings;
    }
    spec += c;
  }
  return spec;
}

// "40 s", "2.5 min", "12 min".
std::string format_duration(double seconds) {
  if (seconds < 90) return fmt::format("{:.0f} s", std::max(seconds, 1.0));
  if (seconds < 600) return fmt::format("{:.1f} min", std::round(seconds / 30) / 2);
  return fmt::format("{:.0f} min", seconds / 60);
}

std::size_t terminal_columns() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 20) return size.ws_col;
  return 80;
}

// The suites register once per process; the options say where they run.
const bench::options& registered_suites(bool quick) {
  static const bench::options options = [quick] {
    auto o = bench::default_options(quick);
    bench::register_all(o);
    return o;
  }();
  return options;
}

// Google Benchmark takes its settings as command-line flags only.
void set_flags(const bench::options& o, bool list_only) {
  // Google Benchmark 1.8 wants a unit on the minimum time; 1.7 wants a plain number.
#if SYNCMEM_BENCHMARK_VERSION_MAJOR > 1 || \
    (SYNCMEM_BENCHMARK_VERSION_MAJOR == 1 && SYNCMEM_BENCHMARK_VERSION_MINOR >= 8)
  std::string min_time = fmt::format("--benchmark_min_time={}s", o.min_time());
#else
  std::string min_time = fmt::format("--benchmark_min_time={}", o.min_time());
#endif
  // Google Benchmark keeps a pointer to argv[0].
  static std::string program = "syncmem bench";
  std::string list = fmt::format("--benchmark_list_tests={}", list_only ? "true" : "false");
  std::vector<char*> argv{program.data(), min_time.data(), list.data(), nullptr};
  int argc = 3;
  benchmark::Initialize(&argc, argv.data());
}

// Why a run did not produce figures ("" when it did), in Google Benchmark 1.7
// (error_occurred) and 1.8 and later (skipped), and whether it was skipped on
// purpose rather than failed.
template <class R>
std::string run_error(const R& r) {
  if constexpr (requires { r.error_occurred; }) {
    return r.error_occurred ? (r.error_message.empty() ? std::string{"failed"} : r.error_message) : std::string{};
  } else {
    return r.skipped ? (r.skip_message.empty() ? std::string{"skipped"} : r.skip_message) : std::string{};
  }
}

template <class R>
bool skipped_on_purpose(const R& r) {
  if constexpr (requires { r.error_occurred; }) {
    return r.error_occurred && std::string_view{r.error_message}.starts_with(bench::skipped_prefix);
  } else {
    return static_cast<int>(r.skipped) == 1;  // benchmark::internal::SkippedWithMessage
  }
}

bench_run convert(const report_run& r) {
  bench_run out;
  std::string base = r.run_name.function_name;
  if (!r.run_name.args.empty()) base += "/" + r.run_name.args;
  out.name = base;  // without Google Benchmark's suffixes (min_time:, real_time, threads:)
  const bench_name parts = parse_bench_name(base);
  out.suite = parts.suite;
  out.case_name = parts.case_name;
  out.method = parts.method;
  out.parameter = parts.parameter;
  out.bytes = parse_size(out.parameter);
  out.ours = is_our_method(out.method);
  out.iterations = static_cast<std::int64_t>(r.iterations);
  out.threads = r.threads;
  out.error = run_error(r);
  out.label = r.report_label;
  if (r.iterations > 0) {
    out.real_time_ns = r.real_accumulated_time * 1e9 / static_cast<double>(r.iterations);
    out.cpu_time_ns = r.cpu_accumulated_time * 1e9 / static_cast<double>(r.iterations);
  }
  for (const auto& [name, counter] : r.counters) {
    if (name == "bytes_per_second") {
      out.bytes_per_second = counter.value;
    } else if (name == "items_per_second") {
      out.items_per_second = counter.value;
    } else {
      out.counters[name] = counter.value;
    }
  }
  return out;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// Keeps every run and shows progress: a bar redrawn in place on a terminal,
// one line per benchmark otherwise. The benchmarks run `rounds` times over.
class progress_reporter final : public benchmark::BenchmarkReporter {
 public:
  progress_reporter(std::vector<std::string> names, std::vector<double> expected_s, int rounds, bench_results& results)
      : names_{std::move(names)},
        expected_s_{std::move(expected_s)},
        total_{names_.size() * static_cast<std::size_t>(rounds)},
        results_{results},
        tty_{::isatty(STDOUT_FILENO) == 1} {}

  bool ReportContext(const Context& context) override {
    in_use_ = bench::release_cached_memory();
    const auto& cpu = context.cpu_info;
    results_.context = {{"cpus", cpu.num_cpus},
                        {"mhz_per_cpu", static_cast<long long>(cpu.cycles_per_second / 1e6)},
                        {"cpu_scaling_enabled", cpu.scaling == benchmark::CPUInfo::ENABLED},
                        {"load_avg", cpu.load_avg}};
    draw();
    return true;
  }

  void ReportRuns(const std::vector<Run>& runs) override {
    std::set<std::string> finished;
    const std::size_t first = results_.runs.size();
    const Run* last = nullptr;
    for (const auto& r : runs) {
      if (r.run_type == Run::RT_Aggregate) continue;
      finished.insert(r.benchmark_name());
      last = &r;
      if (skipped_on_purpose(r)) {
        std::string why = run_error(r);
        if (why.starts_with(bench::skipped_prefix)) why.erase(0, bench::skipped_prefix.size());
        skipped_.push_back(fmt::format("{}: {}", without_settings(r.benchmark_name()), why));
        continue;
      }
      results_.runs.push_back(convert(r));
    }
    if (last != nullptr) fail_if_memory_left(*last, first);
    if (!tty_) {
      for (std::size_t i = first; i < results_.runs.size(); ++i) print_line(results_.runs[i]);
    }
    done_ += finished.size();
    draw();
  }

  void Finalize() override {
    if (tty_) {
      fmt::print("\r\x1b[2K");
      std::fflush(stdout);
    }
  }

  [[nodiscard]] const std::vector<std::string>& skipped() const noexcept { return skipped_; }
  [[nodiscard]] std::string running() const {
    return done_ < total_ && !names_.empty() ? names_[done_ % names_.size()] : std::string{"a benchmark"};
  }

 private:
  void print_line(const bench_run& r) const {
    std::string figures;
    if (!r.error.empty()) {
      figures = "failed: " + r.error;
    } else {
      figures = format_time(r.real_time_ns);
      if (r.bytes_per_second) figures += ", " + format_bandwidth(*r.bytes_per_second);
      for (const auto& [k, v] : r.counters) figures += fmt::format(", {} {}", k, three_digits(v));
    }
    fmt::print("[{}/{}] {}: {}{}\n", done_ + 1, total_, r.name, figures, time_left(done_ + 1));
    std::fflush(stdout);
  }

  // "  (about 40 s left)": what the benchmarks left are expected to take,
  // at the pace of those done against what they were expected to take (a
  // replay takes longer than a pair of allocations, so a count would not do).
  [[nodiscard]] std::string time_left(std::size_t done) const {
    if (done == 0 || done >= total_) return {};
    double expected_done = 0;
    double expected_left = 0;
    for (std::size_t i = 0; i < total_; ++i) (i < done ? expected_done : expected_left) += expected(i);
    const auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double pace = expected_done > 0 ? elapsed / expected_done : 1.0;
    return fmt::format("  (about {} left)", format_duration(expected_left * pace));
  }
  [[nodiscard]] double expected(std::size_t i) const {
    return expected_s_.empty() ? 1.0 : expected_s_[i % expected_s_.size()];
  }

  void draw() const {
    if (!tty_) return;
    constexpr std::size_t bar = 30;
    const std::size_t total = std::max<std::size_t>(total_, 1);
    const std::size_t filled = std::min(bar, done_ * bar / total);
    const auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::string line = fmt::format("[{}{}] {}/{} {:.0f} s", std::string(filled, '#'), std::string(bar - filled, '.'),
                                   done_, total_, elapsed);
    line += time_left(done_);
    if (done_ < total_) line += "  " + running();
    // One line that never wraps, so that \r goes back to its start.
    const std::size_t columns = terminal_columns() - 1;
    if (line.size() > columns) line.resize(columns);
    fmt::print("\r\x1b[2K{}", line);
    std::fflush(stdout);
  }

  // Fails the benchmark just reported when, with every cache emptied, a
  // device holds more than before it ran: the next benchmark would start on a
  // device with less memory, and its figures would not be its own.
  void fail_if_memory_left(const Run& run, std::size_t first) {
    auto now = bench::release_cached_memory();
    std::string left;
    for (const auto& after : now) {
      std::size_t before = 0;
      for (const auto& b : in_use_) {
        if (b.device == after.device) before = b.used_bytes;
      }
      if (after.used_bytes <= before + bench::leak_allowance(after.device)) continue;
      if (!left.empty()) left += "; ";
      left += fmt::format(
          "left {} of device memory behind on {} (in use{} before it: {}; after it, with every cache emptied: {})",
          format_bytes(after.used_bytes - before), to_string(after.device),
          after.whole_device ? " on the whole device, by every process" : " by this process", format_bytes(before),
          format_bytes(after.used_bytes));
    }
    in_use_ = std::move(now);  // each leak is reported once, by the benchmark that made it
    if (left.empty()) return;
    if (first == results_.runs.size()) {  // skipped, but not clean: a failure all the same
      results_.runs.push_back(convert(run));
      results_.runs.back().error.clear();
    }
    for (std::size_t i = first; i < results_.runs.size(); ++i) {
      auto& error = results_.runs[i].error;
      error = error.empty() ? left : error + "; " + left;
    }
  }

  std::vector<std::string> names_;
  std::vector<double> expected_s_;                // each name's expected seconds
  std::vector<bench::device_memory_use> in_use_;  // each device's memory in use after the last benchmark
  std::size_t total_;                             // names × rounds
  bench_results& results_;
  std::vector<std::string> skipped_;
  std::size_t done_ = 0;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Collects what Google Benchmark prints in a listing pass, and its complaints.
class listing_reporter final : public benchmark::BenchmarkReporter {
 public:
  listing_reporter() {
    SetOutputStream(&out_);
    SetErrorStream(&err_);
  }
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
  [[nodiscard]] std::string output() const { return out_.str(); }
  [[nodiscard]] std::string errors() const { return err_.str(); }

 private:
  std::ostringstream out_;
  std::ostringstream err_;
};

}  // namespace

bool benchmarks_built() noexcept { return true; }

std::vector<std::string> list_benchmarks(const bench_request& request) {
  const auto& o = registered_suites(request.quick);
  set_flags(o, true);
  listing_reporter listing;
  const std::string spec = request.filter.empty() ? std::string{"."} : request.filter;
  const std::size_t count = benchmark::RunSpecifiedBenchmarks(&listing, benchmark_spec(request.filter));
  if (count == 0) {
    std::string why = listing.errors();
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    if (why.empty() || why.starts_with("Failed to match")) {
      throw input_error{fmt::format("--filter '{}' matches no benchmark (see `syncmem bench --list`)", spec)};
    }
    throw input_error{fmt::format("--filter '{}': {}", spec, why)};
  }
  std::vector<std::string> names;
  std::istringstream lines{listing.output()};
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) names.push_back(without_settings(line));
  }
  return names;
}

bench_results run_benchmarks(const bench_request& request,
                             const std::function<void(const bench_results&)>& after_round) {
  auto names = list_benchmarks(request);
  const auto& o = registered_suites(request.quick);
  bench_results results;
  results.date = utc_now();
  results.quick = request.quick;
  results.rounds = request.rounds;
  results.filter = request.filter.empty() ? std::string{"."} : request.filter;
  results.gpu = o.gpu();
  for (const auto& d : o.devices) results.devices.push_back(to_string(d));
  results.machine = describe_machine();  // after the suites enabled any emulated device they run on

  std::vector<double> expected;
  for (const auto& name : names) expected.push_back(bench::expected_seconds(name, o));
  double expected_s = 0;
  for (const double e : expected) expected_s += e * request.rounds;
  fmt::print("syncmem bench: {} benchmark{}{} on {}{}; expect about {}{}\n", names.size(), names.size() == 1 ? "" : "s",
             request.rounds > 1 ? fmt::format(", {} rounds", request.rounds) : std::string{},
             fmt::join(results.devices, ", "), results.gpu ? "" : " (no GPU: the figures will not be GPU figures)",
             format_duration(expected_s), request.quick ? "" : " (--quick: a few seconds per suite)");
  std::fflush(stdout);
  set_flags(o, false);
  progress_reporter progress{std::move(names), std::move(expected), request.rounds, results};
  const auto start = std::chrono::steady_clock::now();
  try {
    // Round after round of the same benchmarks in the same order: each
    // benchmark's rounds are spread over the whole session, and the methods
    // of one case stay side by side in each round.
    for (int round = 1; round <= request.rounds; ++round) {
      benchmark::RunSpecifiedBenchmarks(&progress, benchmark_spec(request.filter));
      if (after_round && round < request.rounds) {
        bench_results so_far = results;
        so_far.rounds = round;
        so_far.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        after_round(so_far);
      }
    }
  } catch (const std::exception& e) {
    // A suite should turn its failures into SkipWithError; name the one that did not.
    progress.Finalize();
    throw std::runtime_error{fmt::format("{} threw: {}", progress.running(), e.what())};
  }
  results.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  benchmark::Shutdown();
  for (const auto& s : progress.skipped()) fmt::print("skipped {}\n", s);
  return results;
}

}  // namespace syncmem::tool
