#pragma once

// `syncmem report RESULTS.json -o page.html`: draws results saved by
// `syncmem bench --json` as the HTML page, without measuring.

#include <string>

#include <CLI/CLI.hpp>

namespace syncmem::tool {

struct report_options {
  std::string results_path;
  std::string output_path;  // default: the results' name with .html
  bool table = false;       // also print the summary table
};

void add_report_command(CLI::App& app, report_options& options);

// Throws input_error for unreadable or malformed results.
[[nodiscard]] int run_report(const report_options& options);

}  // namespace syncmem::tool
