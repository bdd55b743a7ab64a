#include "mr/caching/caching_state.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <string_view>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "core/reclaimers.hpp"
#include "core/stream_observers.hpp"
#include "mr/caching/caching_snapshot.hpp"
#include "mr/caching/labels.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr::detail {

using namespace caching;  // NOLINT(google-build-using-namespace): this file ties them together

namespace {

constexpr std::size_t small_request_limit = std::size_t{1} << 20;
// With grow_from_idle and pages no larger than a small segment, the growable
// range wastes no more on a mid-sized block than a small segment does and
// moves its idle pages, so that what a peak wastes is mostly the free parts
// of the small blocks' segments: fewer requests go there. (Larger pages made
// some replays worse.)
constexpr std::size_t small_request_limit_from_idle = std::size_t{256} << 10;
constexpr std::size_t small_segment_size = std::size_t{2} << 20;
constexpr std::size_t large_segment_round = std::size_t{2} << 20;
constexpr std::size_t max_request = std::size_t{1} << 50;
// release_before_grow gives wholly free segments back when they are at least
// this share (1/n) of what is reserved.
constexpr std::size_t release_share_segments = 2;

std::atomic<std::uint64_t> next_resource_id{1};

}  // namespace

// ==== construction and destruction ============================================

caching_state::caching_state(device_id device, caching_options options, memory_resource* upstream, std::string name)
    : device_{device},
      options_{std::move(options)},
      upstream_{upstream},
      name_{std::move(name)},
      id_{next_resource_id.fetch_add(1, std::memory_order_relaxed)},
      reserved_{options_.limit},
      pools_{options_.max_split_size},
      events_{device},
      pending_{events_, pools_, name_},
      segments_{device, upstream, reserved_, pools_},
      range_{device,
             {options_.expandable, options_.release_before_grow, options_.grow_from_idle, options_.expandable_page_size,
              options_.expandable_large_page_size},
             name_,
             pools_,
             reserved_,
             events_,
             segments_.observers()},
      caches_{id_, options_.thread_cache_size} {}

void caching_state::start() {
  observer_ = syncmem::detail::add_stream_observer([this](device_id d, stream_handle s) {
    if (d == device_) release_stream(s);
  });
}

void caching_state::shutdown() noexcept {
  if (observer_ != 0) {
    syncmem::detail::remove_stream_observer(observer_);
    observer_ = 0;
  }
  try {
    const drained_blocks blocks = caches_.close();
    std::lock_guard lock{mutex_};
    return_cached(blocks);
  } catch (const std::exception& e) {
    syncmem::detail::report_failure(e, "{}: taking back per-thread caches failed: {}", name_, e.what());
  }
}

caching_state::~caching_state() {
  if (live_.size() > 0) {
    std::size_t bytes = 0;
    live_.for_each([&bytes](std::uintptr_t, const block* b) { bytes += b->size; });
    syncmem::detail::logger().warn(
        "{}: destroyed with {} allocation{} live ({}); their memory goes back to the device with the rest", name_,
        live_.size(), live_.size() == 1 ? "" : "s", syncmem::detail::format_bytes(bytes));
  }
  settle_counts();
  bool device_alive = true;
  try {
    device_guard guard{device_};
    syncmem::detail::backend_for(device_).synchronize_device(device_.index());  // nothing may still use the memory
  } catch (...) {
    syncmem::detail::log_ignored("synchronizing the device before releasing the cache");
    device_alive = false;  // the runtime is shutting down: release what can be, quietly
  }
  segments_.release_all(device_alive);
  if (device_alive) {
    range_.release_all();
    events_.destroy_all();
  }
}

// ==== the fast path: this thread's cache, no shared lock ========================

void* caching_state::allocate(std::size_t bytes, stream_view s) {
  if (bytes > max_request) [[unlikely]] {
    std::lock_guard lock{mutex_};
    throw_out_of_memory(bytes, bytes);
  }
  const std::size_t key = round_up(bytes, granule);
  stream_handle const stream = s.handle();
  thread_cache* const tc = caches_.of_this_thread(*this);
  // Whether the block may come back to this thread's cache when freed: only
  // if its (stream, size) has a bin. Only then is it worth recording.
  bool cacheable = false;
  const std::uint32_t label = current_label_id();
  if (tc != nullptr) {
    if (block* b = tc->take(stream, key, cacheable); b != nullptr) {
      if (tc->hand_out(b, stream, bytes, label)) {
        std::lock_guard lock{mutex_};
        totals_.fold(*tc);
      }
      return reinterpret_cast<void*>(b->ptr);
    }
  }
  handed out{};
  try {
    out = allocate_slow(bytes, key, s, tc, label);
  } catch (const out_of_memory&) {
    // Memory held for others may come back (see core/reclaimers.hpp): once.
    if (!syncmem::detail::reclaimers_exist() || syncmem::detail::run_reclaimers() == 0) throw;
    out = allocate_slow(bytes, key, s, tc, label);
  }
  if (cacheable) tc->remember(out.b, out.generation);
  return out.p;
}

void caching_state::deallocate(void* p, std::size_t bytes, stream_view s) noexcept {
  thread_cache* tc = nullptr;
  try {
    tc = caches_.of_this_thread(*this);
  } catch (...) {
    // no cache; the slow path frees it
    syncmem::detail::log_ignored("finding this thread's cache for a free");
  }
  if (tc != nullptr && tc->give_back(p, bytes, s.handle())) return;
  try {
    std::lock_guard lock{mutex_};
    if (tc != nullptr) totals_.fold(*tc);
    free_live(p, s.handle());
  } catch (const std::exception& e) {
    try {
      syncmem::detail::report_failure(e, "{}: deallocate of {} failed: {}", name_, p, e.what());
    } catch (...) {  // NOLINT(bugprone-empty-catch): deallocate does not throw
    }
  } catch (...) {
    syncmem::detail::log_ignored("deallocating");
  }
}

// ==== the slow path, under mutex_ ===============================================

caching_state::handed caching_state::allocate_slow(std::size_t bytes, std::size_t key, stream_view s, thread_cache* tc,
                                                   std::uint32_t label) {
  std::lock_guard lock{mutex_};
  if (tc != nullptr) totals_.fold(*tc);
  reserved_.forget_limit_hit();
  if (!pending_.empty() || !pools_.retired().empty()) process_pending();
  const std::size_t small_limit = grows_from_idle() && range_.ready() && range_.page_size() <= small_segment_size
                                      ? small_request_limit_from_idle
                                      : small_request_limit;
  const pool_kind kind = key <= small_limit ? pool_kind::small : pool_kind::large;
  stream_pool& pool = pools_.pool_for(s.handle());
  // The common case inline: a free block of this stream's own pool.
  block* b = pools_.take_free(pool, kind, key);
  if (b != nullptr) [[likely]] {
    ++totals_.central_hits;
  } else {
    b = find_or_grow(kind, key, bytes, pool, s);
  }
  try {
    hand_out(b, bytes, key, s.handle());
  } catch (...) {
    pools_.free_block(b, pool);
    throw;
  }
  b->label.store(label, std::memory_order_relaxed);
  return {reinterpret_cast<void*>(b->ptr), b, b->generation.load(std::memory_order_relaxed)};
}

// After the stream's own pool had no block for the request (allocate_slow).
block* caching_state::find_or_grow(pool_kind kind, std::size_t key, std::size_t bytes, stream_pool& pool,
                                   stream_view s) {
  block* b = find_elsewhere(kind, key, pool, s);
  // Memory parked in per-thread caches may fit: take back what is not in use.
  if (b == nullptr && flush_caches(false) > 0) b = find_cached(kind, key, pool, s);
  if (b != nullptr) {
    ++totals_.central_hits;
    return b;
  }
  b = grow(kind, key, pool, s);
  if (b == nullptr) b = recover(kind, key, bytes, pool, s);
  ++totals_.misses;
  return b;
}

void caching_state::hand_out(block* b, std::size_t bytes, std::size_t key, stream_handle s) {
  live_.insert(b->ptr, b);
  b->status = block_status::allocated;
  b->owner = nullptr;
  b->stream.store(s, std::memory_order_relaxed);
  b->requested.store(bytes, std::memory_order_relaxed);
  b->key.store(key, std::memory_order_relaxed);
  next_generation(b);
  totals_.hand_out(b->size, bytes);
  if (counts_in_ != nullptr) counts_in_->handed_out(b->size, bytes);
}

void caching_state::free_live(void* p, stream_handle s) {
  stream_pool& pool = pools_.pool_for(s);
  block* const b = live_.erase(reinterpret_cast<std::uintptr_t>(p));
  if (b == nullptr) {
    syncmem::detail::logger().error(
        "{}: deallocate of {}, which is not a live allocation of this resource "
        "(a double free, or memory from elsewhere); ignored",
        name_, p);
    return;
  }
  totals_.take_back(b->size, b->requested.load(std::memory_order_relaxed));
  if (counts_in_ != nullptr) counts_in_->taken_back(b->size, b->requested.load(std::memory_order_relaxed));
  next_generation(b);
  if (b->needs_slow_free.load(std::memory_order_relaxed) && pending_.hold(b, s, pool)) return;
  pools_.free_block(b, pool);
}

block* caching_state::find_cached(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s) {
  if (block* b = pools_.take_free(pool, kind, key)) return b;
  return find_elsewhere(kind, key, pool, s);
}

block* caching_state::find_elsewhere(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s) {
  if (block* b = pools_.take_free(pools_.idle(), kind, key)) return b;
  return steal(kind, key, pool, s);
}

// Free memory of other streams, once `s` is made to wait for their work.
block* caching_state::steal(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s) {
  auto take = [&](stream_pool& other, auto&& wait) -> block* {
    block* const b = pools_.take_free(other, kind, key);
    if (b == nullptr) return nullptr;
    try {
      wait();
    } catch (...) {
      pools_.free_block(b, other);
      throw;
    }
    ++totals_.stream_waits;
    return b;
  };
  const bool captures = syncmem::detail::captures_open();
  for (const auto& [stream, other] : pools_.live()) {
    if (other.get() == &pool || other->index(kind).empty()) continue;
    stream_handle const from = stream;
    // An event recorded on a capturing stream would pull `s` into the capture.
    if (captures && syncmem::detail::backend_for(device_).stream_capturing(device_.index(), from)) continue;
    if (block* b = take(*other, [&] { events_.order_after(from, s.handle()); })) return b;
  }
  for (const auto& other : pools_.retired()) {
    const stream_pool& retired = *other;
    if (block* b = take(*other, [&] { events_.wait(s.handle(), retired.retire_event); })) return b;
  }
  return nullptr;
}

block* caching_state::grow(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s) {
  if (kind == pool_kind::large && range_.ready()) return range_.grow(key, pool);
  const std::size_t size = kind == pool_kind::small ? small_segment_size : round_up(key, large_segment_round);
  // Wholly free segments could not serve this request (or it would have had
  // them). When they make up half of what is reserved, the work has moved on
  // (new shapes): give them back first, so that the footprint is exchanged
  // rather than added to. Costs a device synchronisation, only when growing.
  if (kind == pool_kind::large && options_.release_before_grow) release_idle_segments();
  if (kind == pool_kind::large && near_capacity(size) && compact(false)) return range_.grow(key, pool);
  block* const b = segments_.grow(kind, size, pool, s);
  if (b != nullptr) pools_.split(b, key, pool, kind);
  return b;
}

block* caching_state::recover(pool_kind kind, std::size_t key, std::size_t bytes, stream_pool& pool, stream_view s) {
  ++totals_.oom_retries;
  flush_caches(true);
  wait_pending();
  if (block* b = find_cached(kind, key, pool, s)) return b;
  release_free(0);
  if (block* b = grow(kind, key, pool, s)) return b;
  if (compact(true)) {
    if (block* b = grow(kind, key, pool, s)) return b;
  }
  ++totals_.ooms;
  throw_out_of_memory(bytes, key);
}

// Whether growing by `size` takes what is reserved past half of what it may
// reserve (the limit, else the device's memory).
bool caching_state::near_capacity(std::size_t size) {
  std::size_t cap = reserved_.limit().value_or(0);
  if (cap == 0) {
    if (device_memory_ == 0) device_memory_ = get_memory_info(device_).total;
    cap = device_memory_;
  }
  return reserved_.bytes() + size > cap / 2;
}

// Ordinary segments keep their free memory in pieces that only their own
// blocks can use. Near capacity, large blocks grow in the growable range
// instead, where what is freed serves any size; once memory ran out, its
// growths take idle pages from anywhere in it first. Returns whether it
// switched (or, out of memory, started taking idle pages).
bool caching_state::compact(bool out_of_memory) {
  if (!options_.compact_under_pressure || options_.expandable || upstream_ != nullptr) return false;
  if (compacting_ && (!out_of_memory || out_of_memory_)) return false;
  range_.enable_under_pressure(out_of_memory);
  out_of_memory_ = out_of_memory_ || out_of_memory;
  compacting_ = range_.ready();
  if (compacting_) {
    syncmem::detail::logger().info(
        "{}: {}; large blocks now grow in the growable range{}", name_,
        out_of_memory ? "out of memory in ordinary segments" : "past half of what it may reserve",
        out_of_memory ? ", from idle pages first" : "");
  }
  return compacting_;
}

void caching_state::throw_out_of_memory(std::size_t bytes, std::size_t key) {
  oom_info info;
  info.requested = bytes;
  info.device = device_;
  info.label = std::string{current_allocation_label()};
  info.resource = name_;
  try {
    device_guard guard{device_};
    const auto memory = syncmem::detail::backend_for(device_).memory(device_.index());
    info.device_free = memory.free;
    info.device_total = memory.total;
  } catch (...) {
    // report what is known
    syncmem::detail::log_ignored("asking the device's memory for an out-of-memory report");
  }
  const auto t = totals_.current(caches_);
  info.reserved = reserved_.bytes();
  info.in_use = t.allocated > 0 ? static_cast<std::size_t>(t.allocated) : 0;
  const std::size_t largest = pools_.largest_free();
  info.largest_free_block = largest;
  info.limit = reserved_.limit();
  info.hint = bytes > max_request ? std::string{"the request is larger than any device's memory"}
                                  : out_of_memory_hint(key, pools_.free_bytes() + t.thread_cached, largest);
  SYNCMEM_OUT_OF_MEMORY(std::move(info));
}

std::string caching_state::out_of_memory_hint(std::size_t key, std::size_t cached, std::size_t largest) const {
  using syncmem::detail::format_bytes;
  std::string hint;
  if (cached >= key && largest < key) {
    hint = fmt::format(
        "fragmentation: {} of cached memory is free, but in pieces no larger than {}; "
        "growable segments (SYNCMEM_ALLOC_CONF=expandable:1) avoid this, and max_split_mb "
        "keeps large blocks whole for large requests",
        format_bytes(cached), format_bytes(largest));
  }
  if (reserved_.limit_hit()) {
    if (!hint.empty()) hint += "; ";
    hint += fmt::format(
        "the limit of {} on this resource (limit_mb in SYNCMEM_ALLOC_CONF, or set_limit) "
        "would be passed",
        format_bytes(reserved_.limit().value_or(reservation::no_limit)));
  }
  if (reserved_.counted_in_refused()) {
    if (!hint.empty()) hint += "; ";
    hint +=
        "the limit of the resource this pool's memory counts in (pool_options::counts_in; under "
        "syncmem.torch, the memory fraction) would be passed";
  }
  return hint;
}

// ==== per-thread caches ===========================================================

std::size_t caching_state::flush_caches(bool wait) {
  const drained_blocks drained = caches_.take_all(wait);
  return_cached(drained);
  return drained.size();
}

void caching_state::return_cached(const drained_blocks& blocks) {
  for (auto [s, b] : blocks) {
    stream_pool& pool = pools_.pool_for(s);
    live_.erase(b->ptr);
    next_generation(b);
    pools_.free_block(b, pool);
  }
}

void caching_state::retire_cache(thread_cache& cache, drained_blocks& blocks) noexcept {
  try {
    std::lock_guard lock{mutex_};
    return_cached(blocks);
    caches_.forget(cache, [this](thread_cache& c) { totals_.absorb(c); });
  } catch (const std::exception& e) {
    try {
      syncmem::detail::report_failure(e, "{}: taking back a thread's cache failed: {}", name_, e.what());
    } catch (...) {  // NOLINT(bugprone-empty-catch)
    }
  }
}

// ==== pending blocks and destroyed streams ====================================

void caching_state::process_pending() {
  device_guard guard{device_};
  pending_.collect();
  pools_.drop_retired_if([this](stream_pool& p) { return events_.passed(p.retire_event) && merge_into_idle(p); });
}

void caching_state::wait_pending() {
  pending_.synchronize();
  for (const auto& p : pools_.retired()) events_.synchronize(p->retire_event);
  process_pending();
}

bool caching_state::merge_into_idle(stream_pool& retired) noexcept {
  if (!pools_.merge_into_idle(retired)) return false;
  pending_.move_owner(retired, pools_.idle());
  events_.put(retired.retire_event);
  retired.retire_event = event_handle{};
  return true;
}

// A stream is being destroyed (its handle may be reused at once by a new
// stream): nothing of it may stay keyed by the handle.
void caching_state::release_stream(stream_handle handle) noexcept {
  try {
    std::lock_guard lock{mutex_};
    return_cached(caches_.take_stream(handle));  // blocks freed on it that wait in per-thread caches
    pending_.stream_gone(handle);                // uses declared on it: record now what will have to pass
    retire_pool(handle);
  } catch (const std::exception& e) {
    try {
      syncmem::detail::report_failure(e, "{}: releasing stream {:#x} failed: {}", name_,
                                      static_cast<std::uintptr_t>(handle), e.what());
    } catch (...) {  // NOLINT(bugprone-empty-catch)
    }
  }
}

void caching_state::retire_pool(stream_handle handle) {
  stream_pool* const retired = pools_.retire(handle);
  if (retired == nullptr) return;
  retired->retire_event = events_.get();
  try {
    events_.record(retired->retire_event, handle);
  } catch (const std::exception& e) {
    syncmem::detail::report_failure(e,
                                    "{}: recording an event on a stream being destroyed failed ({}); waiting for "
                                    "the device instead",
                                    name_, e.what());
    events_.synchronize_device();
    events_.put(retired->retire_event);
    retired->retire_event = event_handle{};
    if (merge_into_idle(*retired)) pools_.drop_retired_if([retired](const stream_pool& p) { return &p == retired; });
  }
}

void caching_state::record_stream(void* p, stream_view s) {
  SYNCMEM_EXPECTS(s.device() == device_, fmt::format("{}: record_stream with a stream of {}; streams must belong to {}",
                                                     name_, to_string(s.device()), to_string(device_)));
  std::lock_guard lock{mutex_};
  block* const b = live_.find(reinterpret_cast<std::uintptr_t>(p));
  SYNCMEM_EXPECTS(b != nullptr,
                  fmt::format("{}: record_stream of {}, which is not a live allocation of this resource", name_, p));
  pending_.add_use(b, s.handle());
}

// The calling thread's record first (it allocated `p`: no lock), then the
// pointer map under the lock. A block that waits in a thread's cache is in
// the map too; its request is 0 there (thread_cache::keep).
std::optional<live_allocation> caching_state::allocation_info(const void* p) const {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (const thread_cache* tc = caches_.made_for_this_thread(); tc != nullptr) {
    if (const auto* record = tc->handed_out.find(address);
        record != nullptr && record->b->generation.load(std::memory_order_relaxed) == record->generation) {
      return describe_live(record->b);
    }
  }
  std::lock_guard lock{mutex_};
  const block* const b = live_.find(address);
  if (b == nullptr || b->requested.load(std::memory_order_relaxed) == 0) return std::nullopt;
  return describe_live(b);
}

live_allocation caching_state::describe_live(const block* b) const noexcept {
  const segment_pool pool = b->seg->growable                   ? segment_pool::expandable
                            : b->seg->kind == pool_kind::small ? segment_pool::small
                                                               : segment_pool::large;
  return {b->requested.load(std::memory_order_relaxed), b->size,
          syncmem::detail::stream_access::make(device_, b->stream.load(std::memory_order_relaxed)), pool};
}

// ==== giving memory back ======================================================

std::size_t caching_state::trim(std::size_t max_cached_bytes) {
  std::lock_guard lock{mutex_};
  flush_caches(true);
  process_pending();
  return release_free(max_cached_bytes);
}

std::size_t caching_state::release_free(std::size_t max_cached_bytes) {
  const std::size_t free = pools_.free_bytes();
  // Pages moved by a growth may still hold memory at their old place.
  if (free <= max_cached_bytes && range_.moves_in_flight() == 0) return 0;
  std::size_t released = 0;
  if (range_.range() != nullptr) {
    released += range_.reclaim(free > max_cached_bytes ? free - max_cached_bytes : 0, /*keep_handles=*/false);
  }
  for (auto* seg : segments_.idle()) {
    if (pools_.free_bytes() <= max_cached_bytes) break;
    released += segments_.drop(*seg);
  }
  return released;
}

std::size_t caching_state::release_idle_segments() {
  auto idle = segments_.idle();
  // Oversize blocks (max_split_mb) are kept for the large requests they serve.
  std::erase_if(idle, [this](const segment* seg) {
    return seg->kind == pool_kind::large && seg->size > options_.max_split_size;
  });
  std::size_t idle_bytes = 0;
  for (const auto* seg : idle) idle_bytes += seg->size;
  if (idle_bytes == 0 || idle_bytes < reserved_.bytes() / release_share_segments) return 0;
  std::size_t released = 0;
  for (auto* seg : idle) released += segments_.drop(*seg);
  return released;
}

// ==== snapshots (statistics: caching_state_accounts.cpp) ========================

allocator_snapshot caching_state::snapshot() {
  std::lock_guard lock{mutex_};
  flush_caches(true);
  process_pending();
  return take_snapshot({device_, to_string(device_), name_, reserved_.bytes(), &segments_.all(), range_.range()});
}

// ==== segment observers (mr/segment_observer.hpp) ===============================

void caching_state::add_segment_observer(std::shared_ptr<segment_observer> observer) {
  std::lock_guard lock{mutex_};
  segment_observer& o = *observer;
  segments_.observe(std::move(observer));
  range_.report_mapped(o);
}

bool caching_state::remove_segment_observer(const segment_observer* observer) noexcept {
  std::lock_guard lock{mutex_};
  return segments_.stop_observing(observer);
}

void caching_state::detach_segment_observers() noexcept {
  std::lock_guard lock{mutex_};
  range_.report_unmapping();
  segments_.detach_observers();
}

}  // namespace syncmem::mr::detail
