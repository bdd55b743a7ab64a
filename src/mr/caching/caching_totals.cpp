#include "mr/caching/caching_totals.hpp"

#include <algorithm>
#include <mutex>

namespace syncmem::mr::detail::caching {

namespace {

// Written under the allocator's lock only: plain loads and stores, no locked
// instructions (atomic for the readers of the per-thread deltas' kind).
std::int64_t add(std::atomic<std::int64_t>& total, std::int64_t delta) noexcept {
  const std::int64_t value = total.load(std::memory_order_relaxed) + delta;
  total.store(value, std::memory_order_relaxed);
  return value;
}

void raise(std::atomic<std::int64_t>& peak, std::int64_t value) noexcept {
  if (value > peak.load(std::memory_order_relaxed)) peak.store(value, std::memory_order_relaxed);
}

std::size_t non_negative(std::int64_t v) noexcept { return v > 0 ? static_cast<std::size_t>(v) : 0; }

std::int64_t take(std::atomic<std::int64_t>& delta) noexcept {
  const std::int64_t value = delta.load(std::memory_order_relaxed);
  if (value != 0) delta.store(0, std::memory_order_relaxed);
  return value;
}

}  // namespace

void caching_totals::hand_out(std::size_t size, std::size_t bytes) noexcept {
  raise(peak_allocated_, add(allocated_, static_cast<std::int64_t>(size)));
  raise(peak_requested_, add(requested_, static_cast<std::int64_t>(bytes)));
  add(live_, 1);
  ++allocations_;
  allocated_total_ += size;
  requested_total_ += bytes;
}

void caching_totals::take_back(std::size_t size, std::size_t requested) noexcept {
  add(allocated_, -static_cast<std::int64_t>(size));
  add(requested_, -static_cast<std::int64_t>(requested));
  add(live_, -1);
  ++deallocations_;
}

void caching_totals::fold_deltas(thread_cache& tc) noexcept {
  const auto a = take(tc.allocated_delta);
  const auto q = take(tc.requested_delta);
  const auto l = take(tc.live_delta);
  raise(peak_allocated_, add(allocated_, a));
  raise(peak_requested_, add(requested_, q));
  add(live_, l);
}

void caching_totals::absorb(thread_cache& tc) noexcept {
  fold(tc);
  allocations_ += tc.allocations.load(std::memory_order_relaxed);
  deallocations_ += tc.deallocations.load(std::memory_order_relaxed);
  thread_hits_ += tc.hits.load(std::memory_order_relaxed);
  allocated_total_ += tc.allocated_total.load(std::memory_order_relaxed);
  requested_total_ += tc.requested_total.load(std::memory_order_relaxed);
}

caching_totals::totals caching_totals::current(const thread_caches& caches) const {
  totals t{allocated_.load(std::memory_order_relaxed),
           requested_.load(std::memory_order_relaxed),
           live_.load(std::memory_order_relaxed),
           allocations_,
           deallocations_,
           thread_hits_,
           allocated_total_,
           requested_total_,
           0};
  caches.for_each([&t](thread_cache& c) {
    t.allocated += c.allocated_delta.load(std::memory_order_relaxed);
    t.requested += c.requested_delta.load(std::memory_order_relaxed);
    t.live += c.live_delta.load(std::memory_order_relaxed);
    t.allocations += c.allocations.load(std::memory_order_relaxed);
    t.deallocations += c.deallocations.load(std::memory_order_relaxed);
    t.thread_hits += c.hits.load(std::memory_order_relaxed);
    t.allocated_total += c.allocated_total.load(std::memory_order_relaxed);
    t.requested_total += c.requested_total.load(std::memory_order_relaxed);
    std::lock_guard cache_lock{c.lock};
    t.thread_cached += c.cached_bytes;
  });
  return t;
}

caching_statistics caching_totals::report(const totals& t) const {
  caching_statistics s;
  s.allocated_bytes = non_negative(t.allocated);
  s.peak_allocated_bytes = std::max(s.allocated_bytes, non_negative(peak_allocated_.load(std::memory_order_relaxed)));
  s.requested_bytes = non_negative(t.requested);
  s.peak_requested_bytes = std::max(s.requested_bytes, non_negative(peak_requested_.load(std::memory_order_relaxed)));
  s.live_allocations = non_negative(t.live);
  s.allocations = t.allocations;
  s.deallocations = t.deallocations;
  s.thread_cache_hits = t.thread_hits;
  s.cache_hits = central_hits + t.thread_hits;
  s.cache_misses = misses;
  s.stream_waits = stream_waits;
  s.oom_retries = oom_retries;
  s.ooms = ooms;
  // Read while other threads allocate, a total may lag what is live: never below zero.
  s.total_allocated_bytes = std::max<std::uint64_t>(t.allocated_total, s.allocated_bytes);
  s.total_freed_bytes = s.total_allocated_bytes - s.allocated_bytes;
  s.total_requested_bytes = std::max<std::uint64_t>(t.requested_total, s.requested_bytes);
  s.total_requested_freed_bytes = s.total_requested_bytes - s.requested_bytes;
  return s;
}

void caching_totals::reset_peaks(const thread_caches& caches, thread_cache* own) {
  // This thread's deltas are folded first: its next allocation from its cache
  // then folds as soon as it rises above the count here, and raises the peak.
  // (Another thread's delta may still be negative, blocks it freed into its
  // cache: until it folds, its allocations below that are not seen.)
  if (own != nullptr) fold(*own);
  const totals t = current(caches);
  peak_allocated_.store(t.allocated, std::memory_order_relaxed);
  peak_requested_.store(t.requested, std::memory_order_relaxed);
}

}  // namespace syncmem::mr::detail::caching
