// The syncmem command.

#include <cstdio>
#include <exception>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "bench_command.hpp"
#include "files.hpp"
#include "info.hpp"
#include "report_command.hpp"
#include "syncmem/version.hpp"
#include "view_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"syncmem: host/device memory that synchronises itself, measured and shown", "syncmem"};
  app.set_version_flag("--version", syncmem::get_build_info().version);
  app.require_subcommand(1);

  syncmem::tool::info_options info;
  syncmem::tool::add_info_command(app, info);
  syncmem::tool::bench_options bench;
  syncmem::tool::add_bench_command(app, bench);
  syncmem::tool::view_options view;
  syncmem::tool::add_view_command(app, view);
  syncmem::tool::report_options report;
  syncmem::tool::add_report_command(app, report);

  // CLI11 reports an unknown command as a missing one; name it instead.
  auto is_command = [&app](const std::string& name) {
    for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() == name) return true;
    }
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !is_command(argv[1])) {
    fmt::print(stderr, "syncmem: unknown command '{}'\nRun 'syncmem --help' for the commands and their options.\n",
               argv[1]);
    return 2;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "syncmem: {}\nRun 'syncmem --help' for the commands and their options.\n", e.what());
    return 2;
  }

  try {
    if (app.got_subcommand("info")) return syncmem::tool::run_info(info);
    if (app.got_subcommand("bench")) return syncmem::tool::run_bench(bench);
    if (app.got_subcommand("view")) return syncmem::tool::run_view(view);
    if (app.got_subcommand("report")) return syncmem::tool::run_report(report);
  } catch (const syncmem::tool::input_error& e) {
    std::fflush(stdout);  // what was printed comes first: stderr is unbuffered
    fmt::print(stderr, "syncmem: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "syncmem: {}\n", e.what());
    return 1;
  }
  return 0;
}
