#include "info.hpp"

#include <cstdio>
#include <exception>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "syncmem/syncmem.hpp"

namespace syncmem::tool {
namespace {

std::string cuda_version(int v) {
  if (v == 0) return "none";
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

std::string gib(std::size_t bytes) { return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

void add_info_command(CLI::App& app, info_options& options) {
  auto* cmd = app.add_subcommand("info", "Show the build and every device (CUDA and emulated)");
  cmd->add_flag("--json", options.json, "Print JSON instead of text");
}

int run_info(const info_options& options) {
  const auto build = get_build_info();
  nlohmann::json out;
  out["version"] = build.version;
  out["build_type"] = build.build_type;
  out["compiler"] = build.compiler;
  out["cuda_enabled"] = build.cuda_enabled;
  out["cuda_runtime"] = cuda_version(build.cuda_runtime_version);
  out["cuda_driver"] = cuda_version(build.cuda_driver_version);
  out["devices"] = nlohmann::json::array();
  for (const auto& id : devices()) {
    nlohmann::json d;
    d["id"] = to_string(id);
    try {
      const auto p = get_device_properties(id);
      d["name"] = p.name;
      d["memory_bytes"] = p.total_memory;
      d["compute_capability"] = fmt::format("{}.{}", p.compute_capability_major, p.compute_capability_minor);
      d["multiprocessors"] = p.multiprocessors;
      d["link"] = p.link();
      d["pci_bus_id"] = p.pci_bus_id;
      d["virtual_memory"] = p.supports_virtual_memory;
    } catch (const std::exception& e) {
      d["error"] = e.what();
    }
    out["devices"].push_back(std::move(d));
  }
  for (auto kind : {device_kind::cuda, device_kind::emulated}) {
    if (device_count(kind) == 0) out["no_devices"][std::string{to_string(kind)}] = why_no_devices(kind);
  }

  if (options.json) {
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("syncmem {} ({}, {})\n", build.version, build.build_type, build.compiler);
  fmt::print("CUDA backend: {}", build.cuda_enabled ? "built" : "not built");
  if (build.cuda_enabled) {
    fmt::print(", runtime {}, driver {}", cuda_version(build.cuda_runtime_version),
               cuda_version(build.cuda_driver_version));
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
               emulated ? std::string{} : fmt::format("sm_{}  ", d["compute_capability"].get<std::string>()),
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
