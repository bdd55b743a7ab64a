#include "machine.hpp"

#include <exception>
#include <fstream>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "syncmem/syncmem.hpp"

namespace syncmem::tool {
namespace {

std::string cpu_model() {
  std::ifstream in{"/proc/cpuinfo"};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      if (auto colon = line.find(':'); colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

}  // namespace

std::string cuda_version_text(int v) {
  if (v == 0) return "none";
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

nlohmann::json describe_machine() {
  const auto build = get_build_info();
  nlohmann::json out;
  out["version"] = build.version;
  out["build_type"] = build.build_type;
  out["compiler"] = build.compiler;
  out["cuda_enabled"] = build.cuda_enabled;
  out["cuda_runtime"] = cuda_version_text(build.cuda_runtime_version);
  out["cuda_driver"] = cuda_version_text(build.cuda_driver_version);
  out["host"] = {{"cpu", cpu_model()}, {"threads", std::thread::hardware_concurrency()}};
  out["devices"] = nlohmann::json::array();
  for (const auto& id : devices()) {
    nlohmann::json d;
    d["id"] = to_string(id);
    d["kind"] = std::string{to_string(id.kind())};
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
  return out;
}

}  // namespace syncmem::tool
