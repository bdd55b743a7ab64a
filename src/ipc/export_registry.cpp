#include "ipc/export_registry.hpp"

#include <utility>

#include "backend/backend.hpp"
#include "core/ignored_failure.hpp"
#include "core/process.hpp"
#include "syncmem/device_guard.hpp"

namespace syncmem::detail::ipc {
namespace {

bool releasable(const control_data& d) {
  switch (static_cast<export_state>(d.state.load(std::memory_order_acquire))) {
    case export_state::closed:
      return true;
    case export_state::imported:
      return !process_alive(d.importer.load(std::memory_order_acquire));
    case export_state::exported:
      return false;
  }
  return false;
}

}  // namespace

export_registry& export_registry::instance() {
  static auto* const registry = new export_registry{};
  return *registry;
}

void export_registry::add(export_record record) {
  std::lock_guard lock{mutex_};
  records_.push_back(std::move(record));
}

std::size_t export_registry::collect() {
  std::vector<export_record> released;
  {
    std::lock_guard lock{mutex_};
    for (auto it = records_.begin(); it != records_.end();) {
      if (releasable(it->page->data())) {
        released.push_back(std::move(*it));
        it = records_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Outside the lock: dropping an owner frees memory, which may export nothing but takes other locks.
  for (auto& r : released) {
    if (r.signal != event_handle{}) {
      ignore_failure("releasing the signal of an IPC export", [&] {
        device_guard guard{r.device};
        backend_for(r.device).ipc()->release_signal(r.device.index(), r.signal);
      });
    }
  }
  return released.size();
}

std::size_t export_registry::held() {
  std::lock_guard lock{mutex_};
  return records_.size();
}

bool export_registry::names(int fd) const {
  for (const auto& r : records_) {
    for (const int named : r.named) {
      if (named == fd) return true;
    }
  }
  return false;
}

std::optional<export_record> export_registry::find(std::uint64_t nonce) {
  std::lock_guard lock{mutex_};
  for (const auto& r : records_) {
    if (r.page->data().nonce == nonce) return r;
  }
  return std::nullopt;
}

}  // namespace syncmem::detail::ipc
