#pragma once

// `syncmem view SNAPSHOT.json -o page.html`: draws an allocator snapshot.

#include <string>

#include <CLI/CLI.hpp>

namespace syncmem::tool {

struct view_options {
  std::string snapshot_path;
  std::string output_path;  // default: the snapshot's name with .html
};

void add_view_command(CLI::App& app, view_options& options);

// Throws input_error for an unreadable or malformed snapshot.
[[nodiscard]] int run_view(const view_options& options);

}  // namespace syncmem::tool
