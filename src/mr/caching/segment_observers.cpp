#include "mr/caching/segment_observers.hpp"

#include <algorithm>
#include <utility>

namespace syncmem::mr::detail::caching {

void segment_observers::add(std::shared_ptr<segment_observer> observer) { observers_.push_back(std::move(observer)); }

bool segment_observers::remove(const segment_observer* observer) noexcept {
  const auto it =
      std::find_if(observers_.begin(), observers_.end(), [observer](const auto& o) { return o.get() == observer; });
  if (it == observers_.end()) return false;
  observers_.erase(it);
  return true;
}

void segment_observers::added(std::uintptr_t base, std::size_t bytes) const noexcept {
  for (const auto& o : observers_) o->segment_added(reinterpret_cast<void*>(base), bytes);
}

void segment_observers::releasing(std::uintptr_t base, std::size_t bytes) const noexcept {
  for (const auto& o : observers_) o->segment_releasing(reinterpret_cast<void*>(base), bytes);
}

void segment_observers::mapped(std::uintptr_t at, std::size_t bytes) const noexcept {
  for (const auto& o : observers_) o->range_mapped(reinterpret_cast<void*>(at), bytes);
}

void segment_observers::unmapping(std::uintptr_t at, std::size_t bytes) const noexcept {
  for (const auto& o : observers_) o->range_unmapping(reinterpret_cast<void*>(at), bytes);
}

void segment_observers::destroyed() noexcept {
  for (const auto& o : observers_) o->resource_destroyed();
  observers_.clear();
}

}  // namespace syncmem::mr::detail::caching
