#include "info.hpp"

#include <cstdio>
#include <exception>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "machine.hpp"
#include "syncmem/syncmem.hpp"

namespace syncmem::tool {
namespace {

std::string gib(std::size_t bytes) { return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30)); }

// "9.0" to "90".
std::string sm_name(std::string capability) {
  std::erase(capability, '.');
  return capability;
}

}  // namespace

void add_info_command(CLI::App& app, info_options& options) {
  auto* cmd = app.add_subcommand("info", "Show the build and every device (CUDA and emulated)");
  cmd->add_flag("--json", options.json, "Print JSON instead of text");
}

int run_info(const info_options& options) {
  const auto build = get_build_info();
  const nlohmann::json out = describe_machine();
  if (options.json) {
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("syncmem {} ({}, {})\n", build.version, build.build_type, build.compiler);
  fmt::print("CUDA backend: {}", build.cuda_enabled ? "built" : "not built");
  if (build.cuda_enabled) {
    fmt::print(", runtime {}, driver {}", cuda_version_text(build.cuda_runtime_version),
               cuda_version_text(build.cuda_driver_version));
  }
  fmt::print("\n\nDevices:\n");
  if (out["devices"].empty()) fmt::print("  none\n");
  for (const auto& d : out["devices"]) {
    if (d.contains("error")) {
      fmt::print("  {:<11} error: {}\n", d["id"].get<std::string>(), d["error"].get<std::string>());
      continue;
    }
    const bool emulated = d["id"].get<std::string>().starts_with("emulated");
    fmt::print("  {:<11} {:<28} {:>9}  {}{}  {}\n", d["id"].get<std::string>(), d["name"].get<std::string>(),
               gib(d["memory_bytes"].get<std::size_t>()),
               emulated ? std::string{} : fmt::format("sm_{}  ", sm_name(d["compute_capability"].get<std::string>())),
               fmt::format("{} SMs", d["multiprocessors"].get<int>()), d["link"].get<std::string>());
  }
  if (out.contains("no_devices")) {
    for (const auto& [kind, why] : out["no_devices"].items()) {
      fmt::print("  no {} devices: {}\n", kind, why.get<std::string>());
    }
  }
  return 0;
}

}  // namespace syncmem::tool
