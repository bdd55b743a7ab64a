#include "info.hpp"

#include <cstdio>
#include <exception>
#include <limits>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "machine.hpp"
#include "syncmem/mr/caching_options.hpp"
#include "syncmem/syncmem.hpp"

namespace syncmem::tool {
namespace {

std::string gib(std::size_t bytes) { return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30)); }

// "9.0" to "90".
std::string sm_name(std::string capability) {
  std::erase(capability, '.');
  return capability;
}

// The configuration of the default device allocator: SYNCMEM_ALLOC_CONF as
// set, and the options in force; or, when it is malformed, what is wrong.
struct allocator_config {
  std::optional<std::string> text;
  std::optional<mr::caching_options> options;
  std::string error;
};

allocator_config read_allocator_config() {
  allocator_config c;
  c.text = mr::caching_options::environment_text();
  try {
    c.options = mr::caching_options::from_environment();
  } catch (const std::exception& e) {
    c.error = e.what();
  }
  return c;
}

nlohmann::json to_json(const allocator_config& c) {
  nlohmann::json out;
  out["resource"] = "caching_resource";
  out["SYNCMEM_ALLOC_CONF"] = c.text ? nlohmann::json(*c.text) : nlohmann::json(nullptr);
  if (c.options) {
    const auto& o = *c.options;
    constexpr auto unlimited = std::numeric_limits<std::size_t>::max();
    out["options"] = {
        {"max_split_bytes", o.max_split_size == unlimited ? nlohmann::json(nullptr) : nlohmann::json(o.max_split_size)},
        {"expandable", o.expandable},
        {"limit_bytes", o.limit ? nlohmann::json(*o.limit) : nlohmann::json(nullptr)},
        {"thread_cache_bytes", o.thread_cache_size},
        {"text", o.to_string()}};
  } else {
    out["error"] = c.error;
  }
  return out;
}

}  // namespace

void add_info_command(CLI::App& app, info_options& options) {
  auto* cmd = app.add_subcommand("info", "Show the build and every device (CUDA and emulated)");
  cmd->add_flag("--json", options.json, "Print JSON instead of text");
}

int run_info(const info_options& options) {
  const auto build = get_build_info();
  nlohmann::json out = describe_machine();
  const auto allocator = read_allocator_config();
  out["allocator"] = to_json(allocator);
  const int status = allocator.options ? 0 : 2;  // a malformed SYNCMEM_ALLOC_CONF is a usage error
  if (options.json) {
    fmt::print("{}\n", out.dump(2));
    if (status != 0) fmt::print(stderr, "{}\n", allocator.error);
    return status;
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
  fmt::print("\nDevice allocator: caching_resource, one per device\n");
  fmt::print("  SYNCMEM_ALLOC_CONF: {}\n", allocator.text ? "'" + *allocator.text + "'" : std::string{"(not set)"});
  if (!allocator.options) {
    fmt::print(stderr, "{}\n", allocator.error);
    return status;
  }
  fmt::print("  in force: {}\n", allocator.options->to_string());
  return status;
}

}  // namespace syncmem::tool
