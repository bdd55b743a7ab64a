#include "report_command.hpp"

#include <fmt/format.h>

#include "bench_results.hpp"
#include "files.hpp"
#include "json_input.hpp"
#include "report_html.hpp"
#include "report_json.hpp"
#include "report_table.hpp"

namespace syncmem::tool {

void add_report_command(CLI::App& app, report_options& options) {
  auto* cmd = app.add_subcommand("report", "Draw results saved with 'syncmem bench --json' as an HTML page");
  add_page_arguments(*cmd, options.results_path, "RESULTS.json",
                     "Results written by 'syncmem bench --json' (syncmem.bench/1)", options.output_path);
  cmd->add_flag("--table", options.table, "Also print the summary table that 'syncmem bench' prints");
}

int run_report(const report_options& options) {
  const std::string output = page_path(options.results_path, options.output_path, "results");
  const std::string& input = options.results_path;
  const bench_results results = results_from_json(parse_json(read_file(input, "results"), input), input);
  if (options.table) fmt::print("{}", render_table(results));
  write_file(output, render_html(results));
  fmt::print("Wrote {}\n", output);
  return 0;
}

}  // namespace syncmem::tool
