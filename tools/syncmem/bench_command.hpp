#pragma once

// `syncmem bench`: runs the suites (or reads saved results), prints the
// summary table, and writes the JSON and the HTML page.

#include <string>

#include <CLI/CLI.hpp>

namespace syncmem::tool {

struct bench_options {
  bool quick = false;
  std::string filter;
  int rounds = 1;
  std::string json_path;
  std::string html_path;
  std::string from_path;
  bool list = false;
};

void add_bench_command(CLI::App& app, bench_options& options);

// 0 when everything ran, 1 when a benchmark failed (the reports are written
// all the same). Throws input_error for bad options and unreadable files.
[[nodiscard]] int run_bench(const bench_options& options);

}  // namespace syncmem::tool
