// caching_state's counts: its statistics and peaks, and the pool_accounts of
// its graph pools and of the pools that count in it, whose memory counts with
// the cache's.

#include <mutex>

#include <fmt/format.h>

#include "mr/caching/caching_state.hpp"
#include "syncmem/error.hpp"

namespace syncmem::mr::detail {

caching_statistics caching_state::statistics() {
  std::lock_guard lock{mutex_};
  const auto t = totals_.current(caches_);
  caching_statistics s = totals_.report(t);
  s.reserved_bytes = reserved_.bytes();
  s.peak_reserved_bytes = reserved_.peak();
  s.cached_bytes = pools_.free_bytes() + t.thread_cached;
  s.pending_bytes = pending_.bytes();
  s.largest_free_block = pools_.largest_free();
  s.splits = pools_.splits();
  s.merges = pools_.merges();
  s.segments = segments_.all().size() + (range_.has_mapped_pages() ? 1 : 0) + graph_segments_;
  s.segment_allocations = reserved_.growths();
  s.segment_releases = reserved_.releases();
  return s;
}

void caching_state::reset_peaks() {
  std::lock_guard lock{mutex_};
  totals_.reset_peaks(caches_, caches_.made_for_this_thread());
  reserved_.reset_peak();
}

bool caching_state::reserve(std::size_t bytes, bool segment) noexcept {
  std::lock_guard lock{mutex_};
  if (!reserved_.admits(bytes)) return false;
  reserved_.add(bytes);
  reserved_.count_growth();
  if (segment) ++graph_segments_;
  return true;
}

bool caching_state::admits(std::size_t bytes) noexcept {
  std::lock_guard lock{mutex_};
  return reserved_.admits(bytes);
}

void caching_state::add_reserved(std::size_t bytes) noexcept {
  std::lock_guard lock{mutex_};
  reserved_.add(bytes);
}

void caching_state::remove_reserved(std::size_t bytes) noexcept {
  std::lock_guard lock{mutex_};
  reserved_.remove(bytes);
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
  if (counts_in_ != nullptr) counts_in_->handed_out(size, requested);
}

void caching_state::taken_back(std::size_t size, std::size_t requested) noexcept {
  std::lock_guard lock{mutex_};
  totals_.take_back(size, requested);
  if (counts_in_ != nullptr) counts_in_->taken_back(size, requested);
}

void caching_state::count_in(std::shared_ptr<caching::pool_accounts> other) {
  std::lock_guard lock{mutex_};
  SYNCMEM_EXPECTS(reserved_.bytes() == 0 && options_.thread_cache_size == 0,
                  fmt::format("{}: count_in after its first allocation, or with per-thread caches", name_));
  counts_in_ = std::move(other);
  reserved_.count_in(counts_in_.get());
}

// What this state still counts in another one when it goes: its reserve and
// the blocks still live (reported by the destructor), which go with it.
void caching_state::settle_counts() noexcept {
  if (counts_in_ == nullptr) return;
  live_.for_each([this](std::uintptr_t, const caching::block* b) {
    counts_in_->taken_back(b->size, b->requested.load(std::memory_order_relaxed));
  });
  counts_in_->remove_reserved(reserved_.bytes());
  reserved_.count_in(nullptr);
}

}  // namespace syncmem::mr::detail
