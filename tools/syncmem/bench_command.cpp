#include "bench_command.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>

#include <fmt/format.h>

#include "bench_runner.hpp"
#include "files.hpp"
#include "json_input.hpp"
#include "report_html.hpp"
#include "report_json.hpp"
#include "report_table.hpp"
#include "syncmem/mr/caching_options.hpp"

namespace syncmem::tool {

void add_bench_command(CLI::App& app, bench_options& options) {
  auto* cmd = app.add_subcommand(
      "bench",
      "Measure transfers, allocators and synced memory beside the alternatives (cudaMemcpy, cudaMalloc, "
      "cudaMallocAsync, PyTorch's allocator) and report: a table, --json, --html");
  auto* quick =
      cmd->add_flag("--quick", options.quick, "Fewer sizes and shorter measurements (about 30 s without a GPU)");
  auto* filter = cmd->add_option("--filter", options.filter,
                                 "Run only the benchmarks whose name matches REGEX, e.g. '^alloc/' or 'h2d'")
                     ->type_name("REGEX");
  auto* rounds =
      cmd->add_option("--rounds", options.rounds,
                      "Run every benchmark N times, one round of all of them after another, so that a slow spell of "
                      "the machine does not fall on one method alone; the table and the page show each benchmark's "
                      "median round, --json keeps every round")
          ->type_name("N")
          ->check(CLI::Range(1, 1000));
  cmd->add_option("--json", options.json_path,
                  "Write every run, the machine and the date as JSON to FILE (with --rounds, after each round too, so "
                  "that a run stopped early keeps the rounds it finished)")
      ->type_name("FILE");
  cmd->add_option("--html", options.html_path,
                  "Write a self-contained HTML page with plots and the machine description to FILE")
      ->type_name("FILE");
  auto* from = cmd->add_option("--from", options.from_path,
                               "Measure nothing: read results saved with --json and report them again")
                   ->type_name("FILE");
  auto* list = cmd->add_flag("--list", options.list, "Print the names of the benchmarks that would run, and exit");
  from->excludes(quick)->excludes(filter)->excludes(rounds)->excludes(list);
}

int run_bench(const bench_options& options) {
  if (!options.json_path.empty()) check_writable(options.json_path, "--json");
  if (!options.html_path.empty()) check_writable(options.html_path, "--html");
  bench_request request{options.quick, options.filter.empty() ? std::string{"."} : options.filter, options.rounds};

  if (options.from_path.empty()) {
    // As `syncmem info` does: a malformed SYNCMEM_ALLOC_CONF is a usage error,
    // not something to measure with defaults.
    try {
      (void)mr::caching_options::from_environment();
    } catch (const std::exception& e) {
      throw input_error{e.what()};
    }
  }
  if (options.list) {
    for (const auto& name : list_benchmarks(request)) fmt::print("{}\n", name);
    return 0;
  }

  bench_results results;
  if (!options.from_path.empty()) {
    results =
        results_from_json(parse_json(read_file(options.from_path, "results"), options.from_path), options.from_path);
  } else {
    // With --json, the rounds finished so far are saved after each one: a run stopped early keeps them.
    std::function<void(const bench_results&)> save_round;
    if (!options.json_path.empty()) {
      save_round = [&options](const bench_results& so_far) {
        write_file(options.json_path, to_json(so_far).dump(2) + "\n");
      };
    }
    results = run_benchmarks(request, save_round);
  }

  fmt::print("\n{}", render_table(results));
  if (!options.json_path.empty()) {
    write_file(options.json_path, to_json(results).dump(2) + "\n");
    fmt::print("Wrote {}\n", options.json_path);
  }
  if (!options.html_path.empty()) {
    write_file(options.html_path, render_html(results));
    fmt::print("Wrote {}\n", options.html_path);
  }
  const auto failed =
      std::count_if(results.runs.begin(), results.runs.end(), [](const bench_run& r) { return !r.error.empty(); });
  if (failed > 0 && options.from_path.empty()) {
    std::fflush(stdout);  // the table first: stderr is unbuffered and would land inside it
    fmt::print(stderr, "syncmem bench: {} benchmark run{} failed (listed above)\n", failed, failed == 1 ? "" : "s");
    return 1;
  }
  return 0;
}

}  // namespace syncmem::tool
