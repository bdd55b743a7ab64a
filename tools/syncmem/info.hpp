#pragma once

#include <CLI/CLI.hpp>

namespace syncmem::tool {

// `syncmem info`: the build and every device.
struct info_options {
  bool json = false;
};

void add_info_command(CLI::App& app, info_options& options);
[[nodiscard]] int run_info(const info_options& options);

}  // namespace syncmem::tool
