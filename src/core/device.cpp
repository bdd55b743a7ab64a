#include "syncmem/device.hpp"

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/ignored_failure.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"

namespace syncmem {

namespace {

// Which device syncmem made current on this thread. CUDA keeps its own
// current device; an emulated device is current only when selected here.
struct thread_device_state {
  bool emulated_selected = false;
  int emulated_index = 0;
};
thread_local thread_device_state this_thread;

// The device the innermost device_guard on this thread made current. Nothing
// but set_current_device changes it inside a guard's scope: syncmem's own
// calls restore what they switch.
struct guarded_device {
  bool active = false;
  device_id device = device_id::cuda(0);
};
thread_local guarded_device innermost_guard;

}  // namespace

std::string to_string(device_kind kind) { return kind == device_kind::cuda ? "cuda" : "emulated"; }

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

int device_count() noexcept { return device_count(device_kind::cuda) + device_count(device_kind::emulated); }

std::vector<device_id> devices() {
  std::vector<device_id> all;
  for (auto kind : {device_kind::cuda, device_kind::emulated}) {
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
  if (this_thread.emulated_selected) return device_id::emulated(this_thread.emulated_index);
  if (device_count(device_kind::cuda) > 0) return device_id::cuda(detail::cuda_backend().current_index());
  if (device_count(device_kind::emulated) > 0) return device_id::emulated(0);
  SYNCMEM_UNSUPPORTED(
      fmt::format("no device is available: {}; emulated devices are off (set SYNCMEM_EMULATED_DEVICES=N or call "
                  "syncmem::enable_emulated_devices to develop without a GPU)",
                  why_no_devices(device_kind::cuda)));
}

void set_current_device(device_id id) {
  check_device(id);
  if (id.kind() == device_kind::cuda) {
    detail::cuda_backend().make_current(id.index());
    this_thread.emulated_selected = false;
  } else {
    this_thread = {true, id.index()};
  }
  innermost_guard.active = false;  // called inside a guard: the device it made current is no longer so
}

device_guard::device_guard(device_id target)
    : original_{target},
      target_{target},
      original_cuda_index_{-1},
      original_emulated_selected_{this_thread.emulated_selected},
      switched_{false},
      outer_active_{innermost_guard.active},
      outer_device_{innermost_guard.device} {
  if (outer_active_ && outer_device_ == target) return;  // checked and made current by the enclosing guard
  check_device(target);
  original_ = current_device();
  if (original_ != target) {
    if (target.kind() == device_kind::cuda) {
      auto& cuda = detail::cuda_backend();
      const int cuda_current = cuda.current_index();
      if (cuda_current != target.index()) {
        cuda.make_current(target.index());
        original_cuda_index_ = cuda_current;
      }
      this_thread.emulated_selected = false;
    } else {
      this_thread = {true, target.index()};
    }
    switched_ = true;
  }
  innermost_guard = {true, target};
}

device_guard::~device_guard() {
  innermost_guard = {outer_active_, outer_device_};
  if (!switched_) return;
  if (original_cuda_index_ >= 0) {
    try {
      detail::cuda_backend().make_current(original_cuda_index_);
    } catch (...) {
      // restoring must not throw; the backend has reported it
      detail::log_ignored("restoring the current CUDA device");
    }
  }
  this_thread.emulated_selected = original_emulated_selected_;
  if (original_emulated_selected_) this_thread.emulated_index = original_.index();
}

std::string device_properties::link() const {
  if (id.kind() == device_kind::emulated) return "host memory (emulated)";
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
  // Emulated memory is known exactly and cheaply; ask it first.
  if (auto info = detail::emulated_backend().pointer_info(p)) return *info;
  if (device_count(device_kind::cuda) > 0) {
    if (auto info = detail::cuda_backend().pointer_info(p)) return *info;
  }
  return {};
}

}  // namespace syncmem
