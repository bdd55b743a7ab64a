// caching_state as the graph pools' pool_accounts: their memory counts with the cache's.

#include <mutex>

#include "mr/caching/caching_state.hpp"

namespace syncmem::mr::detail {

bool caching_state::reserve(std::size_t bytes, bool segment) noexcept {
  std::lock_guard lock{mutex_};
  if (!reserved_.admits(bytes)) return false;
  reserved_.add(bytes);
  reserved_.count_growth();
  if (segment) ++graph_segments_;
  return true;
}

void caching_state::unreserve(std::size_t bytes, bool segment) noexcept {
  std::lock_guard lock{mutex_};
  reserved_.remove(bytes);
  reserved_.count_release();
  if (segment) --graph_segments_;
}

void caching_state::handed_out(std::size_t size, std::size_t requested) noexcept {
  std::lock_guard lock{mutex_};
  totals_.hand_out(size, requested);
}

void caching_state::taken_back(std::size_t size, std::size_t requested) noexcept {
  std::lock_guard lock{mutex_};
  totals_.take_back(size, requested);
}

}  // namespace syncmem::mr::detail
