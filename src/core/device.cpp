#include "syncmem/device.hpp"

#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/ignored_failure.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"

namespace syncmem {

namespace {

// The kind of device syncmem made current on this thread (nullopt: none
// yet), and for backends that keep no current device of their own the index
// within it. A backend that keeps one (CUDA's runtime, the emulated backend)
// is asked for its index.
struct thread_device_state {
  std::optional<device_kind> selected;
  detail::per_kind<int> index{};
};
thread_local thread_device_state this_thread;

// Makes `id` current on this thread.
void select(device_id id) {
  auto& b = detail::backend_for(id);
  if (b.traits().keeps_current_device) {
    b.make_current(id.index());
  } else {
    this_thread.index[id.kind()] = id.index();
  }
  this_thread.selected = id.kind();
}

// The current device of `kind` on this thread.
int current_index_of(device_kind kind) {
  auto& b = detail::backend_for(kind);
  return b.traits().keeps_current_device ? b.current_index() : this_thread.index[kind];
}

// The device the innermost device_guard on this thread made current. Nothing
// but set_current_device changes it inside a guard's scope: syncmem's own
// calls restore what they switch.
struct guarded_device {
  bool active = false;
  device_id device = device_id::cuda(0);
};
thread_local guarded_device innermost_guard;

}  // namespace

std::string to_string(device_kind kind) { return std::string{detail::names_of(kind).name}; }

std::optional<device_kind> parse_device_kind(std::string_view name) noexcept {
  for (const device_kind kind : device_kinds) {
    if (detail::names_of(kind).name == name) return kind;
  }
  return std::nullopt;
}

std::string to_string(device_id id) { return fmt::format("{}:{}", to_string(id.kind()), id.index()); }

std::string to_string(memory_kind kind) {
  switch (kind) {
    case memory_kind::pageable_host:
      return "pageable";
    case memory_kind::pinned_host:
      return "pinned";
    case memory_kind::device:
      return "device";
    case memory_kind::managed:
      return "managed";
  }
  return "unknown";
}

int device_count(device_kind kind) noexcept { return detail::backend_for(kind).device_count(); }

int device_count() noexcept {
  int count = 0;
  for (const device_kind kind : device_kinds) count += device_count(kind);
  return count;
}

std::vector<device_id> devices() {
  std::vector<device_id> all;
  for (const device_kind kind : device_kinds) {
    for (int i = 0; i < device_count(kind); ++i) all.emplace_back(kind, i);
  }
  return all;
}

std::string why_no_devices(device_kind kind) {
  return device_count(kind) > 0 ? std::string{} : detail::backend_for(kind).why_no_devices();
}

void check_device(device_id id) {
  const int count = device_count(id.kind());
  if (count == 0) {
    SYNCMEM_UNSUPPORTED(fmt::format("device {} does not exist: there are no {} devices: {}", to_string(id),
                                    to_string(id.kind()), why_no_devices(id.kind())));
  }
  SYNCMEM_EXPECTS(id.index() >= 0 && id.index() < count,
                  fmt::format("device index {} is out of range for {} devices: valid indices are 0..{}", id.index(),
                              to_string(id.kind()), count - 1));
}

device_id current_device() {
  if (this_thread.selected) return {*this_thread.selected, current_index_of(*this_thread.selected)};
  // Nothing selected: the first kind with devices, at its current device.
  for (const device_kind kind : device_kinds) {
    if (device_count(kind) == 0) continue;
    return {kind, current_index_of(kind)};
  }
  SYNCMEM_UNSUPPORTED(
      fmt::format("no device is available: {}; emulated devices are off (set SYNCMEM_EMULATED_DEVICES=N or call "
                  "syncmem::enable_emulated_devices to develop without a GPU)",
                  why_no_devices(device_kind::cuda)));
}

void set_current_device(device_id id) {
  check_device(id);
  select(id);
  innermost_guard.active = false;  // called inside a guard: the device it made current is no longer so
}

device_guard::device_guard(device_id target)
    : original_{target},
      target_{target},
      original_target_kind_index_{-1},
      original_selected_kind_{this_thread.selected},
      switched_{false},
      outer_active_{innermost_guard.active},
      outer_device_{innermost_guard.device} {
  if (outer_active_ && outer_device_ == target) return;  // checked and made current by the enclosing guard
  check_device(target);
  original_ = current_device();
  if (original_ != target) {
    auto& b = detail::backend_for(target);
    if (b.traits().keeps_current_device) {
      const int current = b.current_index();
      if (current != target.index()) {
        b.make_current(target.index());
        original_target_kind_index_ = current;
      }
      this_thread.selected = target.kind();
    } else {
      select(target);
    }
    switched_ = true;
  }
  innermost_guard = {true, target};
}

device_guard::~device_guard() {
  innermost_guard = {outer_active_, outer_device_};
  if (!switched_) return;
  if (original_target_kind_index_ >= 0) {
    try {
      detail::backend_for(target_).make_current(original_target_kind_index_);
    } catch (...) {
      // restoring must not throw; the backend has reported it
      detail::log_ignored("restoring the current device");
    }
  }
  this_thread.selected = original_selected_kind_;
  if (original_selected_kind_) this_thread.index[*original_selected_kind_] = original_.index();
}

std::string device_properties::link() const {
  if (detail::backend_for(id).traits().device_memory_is_host_memory) {
    return fmt::format("host memory ({})", to_string(id.kind()));
  }
  if (pcie_generation > 0 && pcie_width > 0) return fmt::format("PCIe Gen{} x{}", pcie_generation, pcie_width);
  if (pcie_generation > 0) return fmt::format("PCIe Gen{}", pcie_generation);
  return "PCIe (generation unknown)";
}

device_properties get_device_properties(device_id id) {
  check_device(id);
  return detail::backend_for(id).properties(id.index());
}

memory_info get_memory_info(device_id id) {
  device_guard guard{id};
  return detail::backend_for(id).memory(id.index());
}

void synchronize_device(device_id id) {
  device_guard guard{id};
  detail::backend_for(id).synchronize_device(id.index());
}

pointer_attributes get_pointer_attributes(const void* p) {
  if (p == nullptr) return {};
  if (auto owner = detail::find_pointer_owner(p)) return owner->attributes;
  return {};
}

}  // namespace syncmem
