#include "mr/caching/graph_pool_observers.hpp"

#include <algorithm>
#include <utility>

namespace syncmem::mr::detail::caching {

void graph_pool_observers::add(std::shared_ptr<segment_observer> observer) {
  std::lock_guard lock{mutex_};
  observers_.push_back(std::move(observer));
}

bool graph_pool_observers::remove(const segment_observer* observer) noexcept {
  std::lock_guard lock{mutex_};
  const auto it =
      std::find_if(observers_.begin(), observers_.end(), [observer](const auto& o) { return o.get() == observer; });
  if (it == observers_.end()) return false;
  observers_.erase(it);
  return true;
}

void graph_pool_observers::clear() noexcept {
  std::lock_guard lock{mutex_};
  observers_.clear();
}

void graph_pool_observers::added(std::uint64_t pool, void* at, std::size_t bytes, bool mapped) const noexcept {
  std::lock_guard lock{mutex_};
  for (const auto& o : observers_) o->graph_pool_added(pool, at, bytes, mapped);
}

void graph_pool_observers::releasing(std::uint64_t pool, void* at, std::size_t bytes, bool mapped) const noexcept {
  std::lock_guard lock{mutex_};
  for (const auto& o : observers_) o->graph_pool_releasing(pool, at, bytes, mapped);
}

}  // namespace syncmem::mr::detail::caching
