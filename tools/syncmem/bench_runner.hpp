#pragma once

// Running the benchmark suites of bench/ (the syncmem_bench library) with a
// reporter of our own: a progress bar on a terminal, plain lines otherwise,
// and every run kept as a bench_run.

#include <functional>
#include <string>
#include <vector>

#include "bench_results.hpp"

namespace syncmem::tool {

struct bench_request {
  bool quick = false;        // fewer sizes and a short minimum time per benchmark
  std::string filter = ".";  // Google Benchmark's regex over the names
  int rounds = 1;            // how many times to run them all, one round after another
};

// Whether this syncmem was built with the suites (SYNCMEM_BUILD_BENCH).
[[nodiscard]] bool benchmarks_built() noexcept;

// The names of the benchmarks `request` selects, in the order they run.
// Throws input_error for a filter that is not a valid regex or matches nothing.
[[nodiscard]] std::vector<std::string> list_benchmarks(const bench_request& request);

// Runs the benchmarks `request` selects and returns what they measured, with
// the machine description and the date. Throws input_error as list_benchmarks.
// `after_round`, when given, is called between rounds with the results of the
// rounds finished so far (their `rounds` says how many).
[[nodiscard]] bench_results run_benchmarks(const bench_request& request,
                                           const std::function<void(const bench_results&)>& after_round = {});

}  // namespace syncmem::tool
