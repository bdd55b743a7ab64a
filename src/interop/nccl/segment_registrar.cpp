#include "segment_registrar.hpp"

#include "core/log.hpp"
#include "syncmem/error.hpp"

namespace syncmem::nccl::detail {

void segment_registrar::segment_added(void* base, std::size_t bytes) noexcept {
  std::string why;
  void* handle = backend_.register_buffer(base, bytes, why);
  std::lock_guard lock{mutex_};
  if (handle == nullptr) {
    ++stats_.failures;
    try {
      syncmem::detail::logger().warn("{}: a segment of {} was not registered ({}); collectives on it copy", owner_,
                                     syncmem::detail::format_bytes(bytes), why);
    } catch (...) {  // NOLINT(bugprone-empty-catch): reporting must not throw
    }
    return;
  }
  try {
    handles_.emplace(base, entry{handle, bytes});
  } catch (...) {
    backend_.deregister_buffer(handle);
    ++stats_.failures;
    return;
  }
  ++stats_.registrations;
  ++stats_.segments;
  stats_.bytes += bytes;
}

void segment_registrar::segment_releasing(void* base, std::size_t /*bytes*/) noexcept {
  std::lock_guard lock{mutex_};
  const auto it = handles_.find(base);
  if (it == handles_.end()) return;
  drop(it->second);
  handles_.erase(it);
}

void segment_registrar::release_all() noexcept {
  std::lock_guard lock{mutex_};
  for (auto& [base, e] : handles_) drop(e);
  handles_.clear();
}

registration_statistics segment_registrar::statistics() const {
  std::lock_guard lock{mutex_};
  return stats_;
}

void segment_registrar::drop(const entry& e) noexcept {
  backend_.deregister_buffer(e.handle);
  ++stats_.deregistrations;
  --stats_.segments;
  stats_.bytes -= e.bytes;
}

}  // namespace syncmem::nccl::detail
