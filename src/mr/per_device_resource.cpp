#include "syncmem/mr/per_device_resource.hpp"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "backend/per_kind.hpp"
#include "core/release_at_exit.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/caching_resource.hpp"

namespace syncmem::mr {
namespace {

constexpr std::size_t max_devices = 64;

struct slot {
  std::atomic<memory_resource*> current{nullptr};
  std::once_flag made;
  std::atomic<caching_resource*> built_in{nullptr};  // never destroyed: frees may come after main()
};

struct registry {
  syncmem::detail::per_kind<std::array<slot, max_devices>> devices;
  // What the built-in resources are made with below SYNCMEM_ALLOC_CONF; the
  // mutex also orders each making against set_default_caching_options.
  std::mutex defaults_mutex;
  caching_options defaults;
  slot& at(device_id device) { return devices[device.kind()][static_cast<std::size_t>(device.index())]; }
};

registry& slots() {
  static auto* const r = new registry{};  // never destroyed, like the resources it holds
  return *r;
}

// A caching allocator per device, configured by SYNCMEM_ALLOC_CONF over the
// process's defaults (a malformed value is an error here, on first use,
// naming what is wrong).
void make_built_in(slot& s, device_id device) {
  registry& all = slots();
  std::lock_guard lock{all.defaults_mutex};
  auto* r = new caching_resource{device, caching_options::from_environment(all.defaults)};
  syncmem::detail::release_at_exit([r] { r->empty_cache(); });
  s.built_in.store(r, std::memory_order_release);
}

slot& checked_slot(device_id device) {
  check_device(device);
  SYNCMEM_EXPECTS(device.index() < static_cast<int>(max_devices),
                  fmt::format("per-device resources are kept for device indices below {}", max_devices));
  return slots().at(device);
}

caching_resource& built_in(slot& s, device_id device) {
  std::call_once(s.made, [&] { make_built_in(s, device); });
  return *s.built_in.load(std::memory_order_acquire);
}

}  // namespace

memory_resource& get_per_device_resource(device_id device) {
  auto& s = checked_slot(device);
  if (auto* r = s.current.load(std::memory_order_acquire)) return *r;
  auto& fallback = built_in(s, device);
  memory_resource* expected = nullptr;
  memory_resource* built = &fallback;
  s.current.compare_exchange_strong(expected, built, std::memory_order_acq_rel);
  return *s.current.load(std::memory_order_acquire);
}

caching_resource& default_resource(device_id device) { return built_in(checked_slot(device), device); }

std::vector<device_id> set_default_caching_options(const caching_options& options) {
  registry& all = slots();
  std::lock_guard lock{all.defaults_mutex};
  const caching_options wanted = caching_options::from_environment(options);  // throws before changing anything
  all.defaults = options;
  std::vector<device_id> kept;
  for (const device_kind kind : device_kinds) {
    for (std::size_t i = 0; i < max_devices; ++i) {
      const caching_resource* r = all.devices[kind][i].built_in.load(std::memory_order_acquire);
      if (r != nullptr && r->options() != wanted) kept.emplace_back(kind, static_cast<int>(i));
    }
  }
  return kept;
}

memory_resource& get_current_device_resource() { return get_per_device_resource(current_device()); }

memory_resource* set_per_device_resource(device_id device, memory_resource* resource) {
  auto& s = checked_slot(device);
  if (resource != nullptr) {
    SYNCMEM_EXPECTS(
        resource->kind() == memory_kind::device && resource->device() == device,
        fmt::format("set_per_device_resource: {} is not a device resource of {}", resource->name(), to_string(device)));
  } else {
    resource = &built_in(s, device);
  }
  auto* previous = s.current.exchange(resource, std::memory_order_acq_rel);
  return previous != nullptr ? previous : &built_in(s, device);
}

}  // namespace syncmem::mr
