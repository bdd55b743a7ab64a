#include "caching_state.hpp"

#include <algorithm>
#include <ctime>
#include <exception>
#include <limits>
#include <string_view>

#include <fmt/format.h>

#include "../../log.hpp"
#include "../../stream_observers.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr::detail {

using namespace caching;  // NOLINT(google-build-using-namespace): this file implements them

namespace {

constexpr std::size_t small_request_limit = std::size_t{1} << 20;
constexpr std::size_t small_segment_size = std::size_t{2} << 20;
constexpr std::size_t large_segment_round = std::size_t{2} << 20;
constexpr std::size_t oversize_slack = std::size_t{20} << 20;
constexpr std::size_t max_request = std::size_t{1} << 50;
constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
// release_before_grow gives memory back when idle memory is at least this
// share (1/n) of what is reserved: wholly free segments, idle pages.
constexpr std::size_t release_share_segments = 2;
constexpr std::size_t release_share_pages = 4;

std::size_t round_up(std::size_t n, std::size_t a) noexcept { return (n + a - 1) / a * a; }
std::size_t round_down(std::size_t n, std::size_t a) noexcept { return n / a * a; }

// For the totals, written under the resource's lock only: plain loads and
// stores, no locked instructions.
std::int64_t add(std::atomic<std::int64_t>& total, std::int64_t delta) noexcept {
  const std::int64_t value = total.load(std::memory_order_relaxed) + delta;
  total.store(value, std::memory_order_relaxed);
  return value;
}
void raise(std::atomic<std::int64_t>& peak, std::int64_t value) noexcept {
  if (value > peak.load(std::memory_order_relaxed)) peak.store(value, std::memory_order_relaxed);
}

std::size_t non_negative(std::int64_t v) noexcept { return v > 0 ? static_cast<std::size_t>(v) : 0; }

std::atomic<std::uint64_t> next_resource_id{1};

std::string hex(std::uintptr_t v) { return fmt::format("{:#x}", v); }
std::string hex(const void* p) { return hex(reinterpret_cast<std::uintptr_t>(p)); }

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char text[32] = {};
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

// ---- allocation labels, interned so that the fast path stores a number ------

constexpr std::uint32_t max_labels = 1U << 16;
constexpr std::uint32_t overflow_label = 1;

struct label_table {
  std::mutex mutex;
  std::unordered_map<std::string, std::uint32_t> ids;
  std::vector<std::string> texts{std::string{}, std::string{"(more distinct labels than syncmem keeps)"}};
};

label_table& labels() {
  static auto* const table = new label_table{};  // never destroyed: resources may outlive main()
  return *table;
}

std::uint32_t intern(std::string_view text) {
  auto& t = labels();
  std::lock_guard lock{t.mutex};
  std::string key{text};
  if (auto it = t.ids.find(key); it != t.ids.end()) return it->second;
  if (t.texts.size() >= max_labels) return overflow_label;
  const auto id = static_cast<std::uint32_t>(t.texts.size());
  t.texts.push_back(key);
  t.ids.emplace(std::move(key), id);
  return id;
}

std::string label_text(std::uint32_t id) {
  auto& t = labels();
  std::lock_guard lock{t.mutex};
  return id < t.texts.size() ? t.texts[id] : std::string{};
}

thread_local std::string tls_label_text;
thread_local std::uint32_t tls_label_id = 0;

std::uint32_t current_label_id() {
  const std::string_view label = current_allocation_label();
  if (label.empty()) return 0;
  if (label != tls_label_text) {
    tls_label_id = intern(label);
    tls_label_text.assign(label);
  }
  return tls_label_id;
}

// ---- this thread's caches ----------------------------------------------------

struct cache_holder {
  std::vector<std::shared_ptr<thread_cache>> caches;
  cache_holder() = default;
  cache_holder(const cache_holder&) = delete;
  cache_holder& operator=(const cache_holder&) = delete;
  ~cache_holder();
};

// The last cache used, by resource id: one comparison on the fast path.
thread_local std::uint64_t tls_cache_id = 0;
thread_local thread_cache* tls_cache = nullptr;
thread_local bool tls_exited = false;
thread_local cache_holder tls_holder;

using drained_list = std::vector<std::pair<CUstream_st*, block*>>;

// Takes every block out of a cache's bins (under its lock).
void drain_locked(thread_cache& c, drained_list& out) {
  c.bins.drain([&out](CUstream_st* s, block* b) { out.emplace_back(s, b); });
  c.cached_bytes = 0;
}

void exit_cache(thread_cache& c) noexcept {
  drained_list blocks;
  std::shared_ptr<caching_state> state;
  try {
    std::lock_guard lock{c.lock};
    if (c.dead) return;
    c.dead = true;
    drain_locked(c, blocks);
    state = c.owner.lock();
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of host memory at thread exit; the blocks stay lost
    return;
  }
  if (state) state->retire_cache(c, blocks);
}

cache_holder::~cache_holder() {
  tls_exited = true;
  tls_cache_id = 0;
  tls_cache = nullptr;
  for (auto& c : caches) exit_cache(*c);
}

}  // namespace

// ==== construction and destruction ============================================

caching_state::caching_state(device_id device, caching_options options, memory_resource* upstream, std::string name)
    : device_{device},
      options_{std::move(options)},
      upstream_{upstream},
      name_{std::move(name)},
      id_{next_resource_id.fetch_add(1, std::memory_order_relaxed)},
      backend_{syncmem::detail::backend_for(device)},
      index_{device.index()},
      limit_{options_.limit.value_or(none)} {
  idle_.kind = stream_pool::role::idle;
}

void caching_state::start() {
  observer_ = syncmem::detail::add_stream_observer([this](device_id d, CUstream_st* s) {
    if (d == device_) release_stream(s);
  });
}

void caching_state::shutdown() noexcept {
  if (observer_ != 0) {
    syncmem::detail::remove_stream_observer(observer_);
    observer_ = 0;
  }
  try {
    std::vector<std::shared_ptr<thread_cache>> caches;
    {
      std::lock_guard lock{registry_mutex_};
      caches.swap(caches_);
    }
    drained_list blocks;
    for (auto& c : caches) {
      std::lock_guard lock{c->lock};
      if (c->dead) continue;
      c->dead = true;
      drain_locked(*c, blocks);
    }
    std::lock_guard lock{mutex_};
    for (auto [s, b] : blocks) return_cached(b, s);
  } catch (const std::exception& e) {
    syncmem::detail::report_failure(e, "{}: taking back per-thread caches failed: {}", name_, e.what());
  }
}

caching_state::~caching_state() {
  auto& log = syncmem::detail::logger();
  if (live_.size() > 0) {
    std::size_t bytes = 0;
    live_.for_each([&bytes](std::uintptr_t, const block* b) { bytes += b->size; });
    log.warn("{}: destroyed with {} allocation{} live ({}); their memory goes back to the device with the rest",
             name_, live_.size(), live_.size() == 1 ? "" : "s", syncmem::detail::format_bytes(bytes));
  }
  bool device_alive = true;
  try {
    device_guard guard{device_};
    backend_.synchronize_device(index_);  // nothing may still run on the memory, or wait for the events
  } catch (...) {
    device_alive = false;  // the runtime is shutting down: release what can be, quietly
  }
  for (auto& entry : segments_) {
    auto& seg = *entry.second;
    try {
      if (upstream_ != nullptr) {
        upstream_->deallocate(reinterpret_cast<void*>(seg.base), seg.size, default_stream(device_));
      } else if (device_alive) {
        device_guard guard{device_};
        backend_.deallocate(index_, reinterpret_cast<void*>(seg.base), seg.size);
      }
    } catch (...) {  // NOLINT(bugprone-empty-catch): the device is gone
    }
  }
  if (range_ != nullptr && device_alive) {
    try {
      device_guard guard{device_};
      backend_.make_current(index_);
      for (std::size_t i = 0; i < pages_.size(); ++i) {
        if (pages_[i] == 0) continue;
        backend_.vmm_unmap(index_, reinterpret_cast<void*>(range_->base + i * page_size_), page_size_);
        backend_.vmm_release(index_, pages_[i], page_size_);
      }
      for (auto h : spare_pages_) backend_.vmm_release(index_, h, page_size_);
      backend_.vmm_free_address(index_, reinterpret_cast<void*>(range_->base), range_->size);
    } catch (...) {  // NOLINT(bugprone-empty-catch)
    }
  }
  if (device_alive) {
    for (CUevent_st* e : all_events_) {
      try {
        device_guard guard{device_};
        backend_.destroy_event(index_, e);
      } catch (...) {  // NOLINT(bugprone-empty-catch)
      }
    }
  }
}

// ==== the fast path ===========================================================

thread_cache* caching_state::cache_of_this_thread() {
  if (tls_cache_id == id_) return tls_cache;
  if (options_.thread_cache_size == 0 || tls_exited) return nullptr;
  return find_or_make_cache();
}

thread_cache* caching_state::find_or_make_cache() {
  auto& holder = tls_holder;
  thread_cache* found = nullptr;
  for (auto& c : holder.caches) {
    if (c->id == id_) {
      found = c.get();
      break;
    }
  }
  if (found == nullptr) {
    // Forget caches of resources that are gone before adding one.
    std::erase_if(holder.caches, [](const std::shared_ptr<thread_cache>& c) {
      std::lock_guard lock{c->lock};
      return c->dead;
    });
    auto c = std::make_shared<thread_cache>(weak_from_this(), this, id_, options_.thread_cache_size);
    holder.caches.push_back(c);
    try {
      std::lock_guard lock{registry_mutex_};
      caches_.push_back(c);
    } catch (...) {
      holder.caches.pop_back();
      throw;
    }
    found = c.get();
  }
  tls_cache_id = id_;
  tls_cache = found;
  return found;
}

void caching_state::fold(thread_cache& tc) noexcept {
  const auto a = tc.allocated_delta.load(std::memory_order_relaxed);
  const auto q = tc.requested_delta.load(std::memory_order_relaxed);
  const auto l = tc.live_delta.load(std::memory_order_relaxed);
  if (a == 0 && q == 0 && l == 0) return;
  tc.allocated_delta.store(0, std::memory_order_relaxed);
  tc.requested_delta.store(0, std::memory_order_relaxed);
  tc.live_delta.store(0, std::memory_order_relaxed);
  raise(peak_allocated_, add(allocated_, a));
  raise(peak_requested_, add(requested_, q));
  add(live_count_, l);
}

void* caching_state::allocate(std::size_t bytes, stream_view s) {
  if (bytes > max_request) [[unlikely]] {
    std::lock_guard lock{mutex_};
    throw_out_of_memory(bytes, bytes);
  }
  const std::size_t key = round_up(bytes, granule);
  CUstream_st* const stream = s.native_handle();
  thread_cache* const tc = cache_of_this_thread();
  // Whether the block may come back to this thread's cache when freed: only
  // if its (stream, size) has a bin. Only then is it worth recording.
  bool cacheable = false;
  if (tc != nullptr) {
    const std::uint32_t label = current_label_id();
    block* b = nullptr;
    // Bins are added and moved by this thread only: finding one needs no lock.
    if (bin* found = tc->bins.find(stream, key); found != nullptr) {
      cacheable = true;
      std::lock_guard lock{tc->lock};
      if (found->count > 0) {
        b = found->items[--found->count];
        tc->cached_bytes -= b->size;
      }
    } else {
      auto& recent = tc->recent_misses[(key / granule * 31 + (reinterpret_cast<std::uintptr_t>(stream) >> 4)) & 255];
      if (recent.key == key && recent.stream == stream) {
        try {
          std::lock_guard lock{tc->lock};
          (void)tc->bins.find_or_add(stream, key);
          cacheable = true;
        } catch (...) {  // NOLINT(bugprone-empty-catch): no bin, no caching of this size
        }
      } else {
        recent = {stream, key};
      }
    }
    if (b != nullptr) {
      b->stream.store(stream, std::memory_order_relaxed);
      b->requested.store(bytes, std::memory_order_relaxed);
      b->label.store(label, std::memory_order_relaxed);
      next_generation(b);
      const std::uint32_t generation = b->generation.load(std::memory_order_relaxed);
      try {
        tc->handed_out.insert(b->ptr, b, generation);
      } catch (...) {  // NOLINT(bugprone-empty-catch): unrecorded, its free takes the slow path
      }
      bump(tc->allocated_delta, static_cast<std::int64_t>(b->size));
      bump(tc->requested_delta, static_cast<std::int64_t>(bytes));
      bump(tc->live_delta, 1);
      bump(tc->allocations);
      bump(tc->hits);
      if (tc->allocated_delta.load(std::memory_order_relaxed) > 0 ||
          tc->requested_delta.load(std::memory_order_relaxed) > 0) {
        std::lock_guard lock{mutex_};
        fold(*tc);  // a new high for this thread: the totals (and peaks) must see it
      }
      return reinterpret_cast<void*>(b->ptr);
    }
  }
  const handed out = allocate_slow(bytes, key, s, tc);
  if (cacheable) {
    try {
      tc->handed_out.insert(out.b->ptr, out.b, out.generation);
    } catch (...) {  // NOLINT(bugprone-empty-catch): unrecorded, its free takes the slow path
    }
  }
  return out.p;
}

void caching_state::deallocate(void* p, std::size_t bytes, stream_view s) noexcept {
  thread_cache* tc = nullptr;
  try {
    tc = cache_of_this_thread();
  } catch (...) {  // NOLINT(bugprone-empty-catch): no cache; the slow path frees it
  }
  if (tc != nullptr && free_into_cache(*tc, p, bytes, s.native_handle())) return;
  deallocate_slow(p, s, tc);
}

bool caching_state::free_into_cache(thread_cache& tc, void* p, std::size_t bytes, CUstream_st* s) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const auto* record = tc.handed_out.find(address);
  if (record == nullptr) return false;
  block* const b = record->b;
  const bool current = b->generation.load(std::memory_order_relaxed) == record->generation;
  tc.handed_out.erase(address);
  if (!current || b->needs_slow_free.load(std::memory_order_acquire)) return false;
  const std::size_t key = round_up(bytes, granule);
  if (b->key.load(std::memory_order_relaxed) != key) return false;  // the size given differs: let the slow path check
  const std::size_t size = b->size;
  const auto requested = static_cast<std::int64_t>(b->requested.load(std::memory_order_relaxed));
  bin* const target = tc.bins.find(s, key);  // bins are added by this thread only: no lock to find one
  if (target == nullptr) return false;
  {
    std::lock_guard lock{tc.lock};
    if (tc.dead || size > tc.budget || tc.cached_bytes > tc.budget - size) return false;
    if (target->count >= target->capacity) return false;
    target->items[target->count++] = b;
    tc.cached_bytes += size;
  }
  bump(tc.allocated_delta, -static_cast<std::int64_t>(size));
  bump(tc.requested_delta, -requested);
  bump(tc.live_delta, -1);
  bump(tc.deallocations);
  return true;
}

// ==== the slow path ===========================================================

caching_state::handed caching_state::allocate_slow(std::size_t bytes, std::size_t key, stream_view s,
                                                   thread_cache* tc) {
  const std::uint32_t label = current_label_id();
  std::lock_guard lock{mutex_};
  if (tc != nullptr) fold(*tc);
  limit_hit_ = false;
  if (pending_ != nullptr || !retired_.empty()) process_pending();
  const pool_kind kind = key <= small_request_limit ? pool_kind::small : pool_kind::large;
  stream_pool& pool = pool_for(s.native_handle());
  block* b = find_cached(kind, key, pool, s);
  // Memory parked in per-thread caches may fit: take back what is not in use.
  if (b == nullptr && flush_caches(false) > 0) b = find_cached(kind, key, pool, s);
  if (b != nullptr) {
    ++central_hits_;
  } else {
    b = grow(kind, key, pool, s);
    if (b == nullptr) b = recover(kind, key, bytes, pool, s);
    ++misses_;
  }
  try {
    hand_out(b, bytes, key, s.native_handle());
  } catch (...) {
    free_block(b, pool);
    throw;
  }
  b->label.store(label, std::memory_order_relaxed);
  return {reinterpret_cast<void*>(b->ptr), b, b->generation.load(std::memory_order_relaxed)};
}

void caching_state::hand_out(block* b, std::size_t bytes, std::size_t key, CUstream_st* s) {
  live_.insert(b->ptr, b);
  b->status = block_status::allocated;
  b->owner = nullptr;
  b->stream.store(s, std::memory_order_relaxed);
  b->requested.store(bytes, std::memory_order_relaxed);
  b->key.store(key, std::memory_order_relaxed);
  next_generation(b);
  raise(peak_allocated_, add(allocated_, static_cast<std::int64_t>(b->size)));
  raise(peak_requested_, add(requested_, static_cast<std::int64_t>(bytes)));
  add(live_count_, 1);
  ++allocations_;
}

void caching_state::deallocate_slow(void* p, stream_view s, thread_cache* tc) noexcept {
  try {
    std::lock_guard lock{mutex_};
    if (tc != nullptr) fold(*tc);
    CUstream_st* const stream = s.native_handle();
    stream_pool& pool = pool_for(stream);
    block* const b = live_.find(reinterpret_cast<std::uintptr_t>(p));
    if (b == nullptr) {
      syncmem::detail::logger().error("{}: deallocate of {}, which is not a live allocation of this resource "
                                      "(a double free, or memory from elsewhere); ignored",
                                      name_, p);
      return;
    }
    live_.erase(b->ptr);
    add(allocated_, -static_cast<std::int64_t>(b->size));
    add(requested_, -static_cast<std::int64_t>(b->requested.load(std::memory_order_relaxed)));
    add(live_count_, -1);
    ++deallocations_;
    next_generation(b);
    if (b->needs_slow_free.load(std::memory_order_relaxed)) {
      b->needs_slow_free.store(false, std::memory_order_relaxed);
      with_uses_.erase(b);
      // Uses on other streams: the block waits for events recorded now.
      for (CUstream_st* use : b->uses) {
        if (use == stream) continue;
        try {
          CUevent_st* e = get_event();
          try {
            record(e, use);
          } catch (...) {
            put_event(e);
            throw;
          }
          b->events.push_back(e);
        } catch (const std::exception& e) {
          syncmem::detail::report_failure(e, "{}: recording the use of {} on stream {} failed ({}); waiting for the "
                                          "device instead",
                                          name_, p, hex(use), e.what());
          device_guard guard{device_};
          backend_.synchronize_device(index_);
        }
      }
      b->uses.clear();
      if (!b->events.empty()) {
        b->status = block_status::pending;
        b->owner = &pool;
        b->link_prev = nullptr;
        b->link_next = pending_;
        if (pending_ != nullptr) pending_->link_prev = b;
        pending_ = b;
        pending_bytes_ += b->size;
        return;
      }
    }
    free_block(b, pool);
  } catch (const std::exception& e) {
    try {
      syncmem::detail::report_failure(e, "{}: deallocate of {} failed: {}", name_, p, e.what());
    } catch (...) {  // NOLINT(bugprone-empty-catch): deallocate does not throw
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch)
  }
}

caching_state::stream_pool& caching_state::pool_for(CUstream_st* s) {
  if (last_pool_ != nullptr && last_pool_->stream == s) return *last_pool_;
  auto it = pools_.find(s);
  if (it == pools_.end()) {
    auto fresh = std::make_unique<stream_pool>();
    fresh->stream = s;
    it = pools_.emplace(s, std::move(fresh)).first;
  }
  last_pool_ = it->second.get();
  return *last_pool_;
}

caching_state::block* caching_state::find_cached(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s) {
  if (block* b = take_free(pool, kind, key)) return b;
  if (block* b = take_free(idle_, kind, key)) return b;
  return steal(kind, key, pool, s);
}

caching_state::block* caching_state::take_free(stream_pool& pool, pool_kind kind, std::size_t key) {
  auto& index = pool.index(kind);
  if (index.empty()) return nullptr;
  std::size_t max_size = none;
  const std::size_t max_split = options_.max_split_size;
  if (kind == pool_kind::large && max_split != none && !growable()) {
    // Oversize blocks (over max_split) serve only requests near their size.
    max_size = key < max_split ? max_split - 1 : (key > none - oversize_slack ? none : key + oversize_slack);
  }
  block* b = index.find(key, max_size);
  if (b == nullptr) return nullptr;
  index.remove(b);
  split(b, key, pool, kind);
  return b;
}

caching_state::block* caching_state::steal(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s) {
  for (auto& [stream, other] : pools_) {
    if (other.get() == &pool || other->index(kind).empty()) continue;
    block* b = take_free(*other, kind, key);
    if (b == nullptr) continue;
    try {
      order_after(stream, s);
    } catch (...) {
      free_block(b, *other);
      throw;
    }
    return b;
  }
  for (auto& other : retired_) {
    block* b = take_free(*other, kind, key);
    if (b == nullptr) continue;
    try {
      device_guard guard{device_};
      backend_.stream_wait_event(index_, s.native_handle(), other->retire_event);
    } catch (...) {
      free_block(b, *other);
      throw;
    }
    ++stream_waits_;
    return b;
  }
  return nullptr;
}

void caching_state::order_after(CUstream_st* other, stream_view s) {
  CUevent_st* e = get_event();
  try {
    device_guard guard{device_};
    backend_.record_event(index_, e, other);
    backend_.stream_wait_event(index_, s.native_handle(), e);
  } catch (...) {
    put_event(e);
    throw;
  }
  // A wait holds on to the event as recorded when it was made: it may be
  // recorded again at once.
  put_event(e);
  ++stream_waits_;
}

void caching_state::split(block* b, std::size_t key, stream_pool& pool, pool_kind kind) {
  const std::size_t rest = b->size - key;
  if (rest < granule) return;
  if (kind == pool_kind::large && !b->seg->growable && b->size > options_.max_split_size) return;
  block* r = nullptr;
  try {
    r = blocks_.make();
  } catch (...) {  // NOLINT(bugprone-empty-catch): no record for the rest: hand out the whole block
    return;
  }
  r->ptr = b->ptr + key;
  r->size = rest;
  r->seg = b->seg;
  r->status = block_status::free;
  r->owner = &pool;
  link_after(b, r);
  b->size = key;
  pool.index(kind).insert(r);
  ++splits_;
}

caching_state::block* caching_state::free_block(block* b, stream_pool& pool) noexcept {
  auto& index = pool.index(b->seg->kind);
  b->status = block_status::free;
  b->owner = &pool;
  if (block* prev = b->prev; prev != nullptr && prev->status == block_status::free && prev->owner == &pool) {
    index.remove(prev);
    prev->size += b->size;
    unlink_from_segment(b);
    blocks_.release(b);
    b = prev;
    ++merges_;
  }
  if (block* next = b->next; next != nullptr && next->status == block_status::free && next->owner == &pool) {
    index.remove(next);
    b->size += next->size;
    unlink_from_segment(next);
    blocks_.release(next);
    ++merges_;
  }
  index.insert(b);
  return b;
}

caching_state::block* caching_state::grow(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s) {
  if (kind == pool_kind::large && growable_ready()) return grow_growable(key, pool);
  const std::size_t size = kind == pool_kind::small ? small_segment_size : round_up(key, large_segment_round);
  // Wholly free segments could not serve this request (or it would have had
  // them). When they make up half of what is reserved, the work has moved on
  // (new shapes): give them back first, so that the footprint is exchanged
  // rather than added to. Costs a device synchronisation, only when growing.
  if (kind == pool_kind::large && options_.release_before_grow) release_idle_segments();
  if (exceeds_limit(size)) {
    limit_hit_ = true;
    return nullptr;
  }
  auto seg = std::make_unique<segment>();
  block* b = blocks_.make();
  void* p = nullptr;
  try {
    if (upstream_ != nullptr) {
      try {
        p = upstream_->allocate(size, s);
      } catch (const std::bad_alloc&) {  // out_of_memory too: handled like the device's
        p = nullptr;
      }
    } else {
      device_guard guard{device_};
      p = backend_.allocate(index_, size);
    }
  } catch (...) {
    blocks_.release(b);
    throw;
  }
  if (p == nullptr) {
    blocks_.release(b);
    return nullptr;
  }
  seg->base = reinterpret_cast<std::uintptr_t>(p);
  seg->size = size;
  seg->kind = kind;
  seg->stream = s.native_handle();
  seg->first = b;
  b->ptr = seg->base;
  b->size = size;
  b->seg = seg.get();
  b->status = block_status::free;
  b->owner = &pool;
  try {
    segments_.emplace(seg->base, std::move(seg));
  } catch (...) {
    blocks_.release(b);
    if (upstream_ != nullptr) {
      upstream_->deallocate(p, size, s);
    } else {
      device_guard guard{device_};
      backend_.deallocate(index_, p, size);
    }
    throw;
  }
  reserved_ += size;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++segment_allocations_;
  split(b, key, pool, kind);
  return b;
}

caching_state::block* caching_state::recover(pool_kind kind, std::size_t key, std::size_t bytes, stream_pool& pool,
                                             stream_view s) {
  ++oom_retries_;
  flush_caches(true);
  wait_pending();
  if (block* b = find_cached(kind, key, pool, s)) return b;
  release_free(0);
  if (block* b = grow(kind, key, pool, s)) return b;
  ++ooms_;
  throw_out_of_memory(bytes, key);
}

void caching_state::throw_out_of_memory(std::size_t bytes, std::size_t key) {
  oom_info info;
  info.requested = bytes;
  info.device = device_;
  info.label = std::string{current_allocation_label()};
  info.resource = name_;
  try {
    device_guard guard{device_};
    const auto memory = backend_.memory(index_);
    info.device_free = memory.free;
    info.device_total = memory.total;
  } catch (...) {  // NOLINT(bugprone-empty-catch): report what is known
  }
  const totals t = current_totals();
  info.reserved = reserved_;
  info.in_use = non_negative(t.allocated);
  const std::size_t cached = free_bytes() + t.thread_cached;
  const std::size_t largest = largest_free();
  info.largest_free_block = largest;
  const std::size_t limit = limit_.load(std::memory_order_relaxed);
  if (limit != none) info.limit = limit;
  using syncmem::detail::format_bytes;
  if (bytes > max_request) {
    info.hint = "the request is larger than any device's memory";
  } else {
    if (cached >= key && largest < key) {
      info.hint = fmt::format("fragmentation: {} of cached memory is free, but in pieces no larger than {}; "
                              "growable segments (SYNCMEM_ALLOC_CONF=expandable:1) avoid this, and max_split_mb "
                              "keeps large blocks whole for large requests",
                              format_bytes(cached), format_bytes(largest));
    }
    if (limit_hit_) {
      if (!info.hint.empty()) info.hint += "; ";
      info.hint += fmt::format("the limit of {} on this resource (limit_mb in SYNCMEM_ALLOC_CONF, or set_limit) "
                               "would be passed",
                               format_bytes(limit));
    }
  }
  throw out_of_memory{std::move(info)};
}

std::size_t caching_state::flush_caches(bool wait) {
  std::vector<std::shared_ptr<thread_cache>> caches;
  {
    std::lock_guard lock{registry_mutex_};
    caches = caches_;
  }
  drained_list drained;
  for (auto& c : caches) {
    std::unique_lock lock{c->lock, std::defer_lock};
    if (wait) {
      lock.lock();
    } else if (!lock.try_lock()) {
      continue;  // its thread is using it: leave it
    }
    if (!c->dead) drain_locked(*c, drained);
  }
  for (auto [s, b] : drained) return_cached(b, s);
  return drained.size();
}

void caching_state::return_cached(block* b, CUstream_st* s) {
  stream_pool& pool = pool_for(s);
  live_.erase(b->ptr);
  next_generation(b);
  free_block(b, pool);
}

void caching_state::retire_cache(thread_cache& cache, drained_list& blocks) noexcept {
  try {
    std::lock_guard lock{mutex_};
    for (auto [s, b] : blocks) return_cached(b, s);
    std::lock_guard registry{registry_mutex_};
    fold(cache);
    allocations_ += cache.allocations.load(std::memory_order_relaxed);
    deallocations_ += cache.deallocations.load(std::memory_order_relaxed);
    thread_hits_ += cache.hits.load(std::memory_order_relaxed);
    std::erase_if(caches_, [&cache](const std::shared_ptr<thread_cache>& c) { return c.get() == &cache; });
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
  for (block* b = pending_; b != nullptr;) {
    block* const next = b->link_next;
    const bool done = std::all_of(b->events.begin(), b->events.end(), [this](CUevent_st* e) { return passed(e); });
    if (done) {
      if (b->link_prev != nullptr) {
        b->link_prev->link_next = b->link_next;
      } else {
        pending_ = b->link_next;
      }
      if (b->link_next != nullptr) b->link_next->link_prev = b->link_prev;
      b->link_prev = b->link_next = nullptr;
      pending_bytes_ -= b->size;
      for (CUevent_st* e : b->events) put_event(e);
      b->events.clear();
      free_block(b, *b->owner);
    }
    b = next;
  }
  for (std::size_t i = 0; i < retired_.size();) {
    if (passed(retired_[i]->retire_event) && merge_into_idle(*retired_[i])) {
      retired_.erase(retired_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

void caching_state::wait_pending() {
  {
    device_guard guard{device_};
    for (block* b = pending_; b != nullptr; b = b->link_next) {
      for (CUevent_st* e : b->events) backend_.synchronize_event(index_, e);
    }
    for (auto& p : retired_) backend_.synchronize_event(index_, p->retire_event);
  }
  process_pending();
}

bool caching_state::merge_into_idle(stream_pool& retired) noexcept {
  try {
    for (pool_kind kind : {pool_kind::small, pool_kind::large}) {
      const auto blocks = retired.index(kind).all();
      for (block* b : blocks) retired.index(kind).remove(b);
      // In turn: a block merges only with neighbours already moved.
      for (block* b : blocks) free_block(b, idle_);
    }
  } catch (...) {  // out of host memory: the blocks stay with the retired pool for now
    return false;
  }
  for (block* b = pending_; b != nullptr; b = b->link_next) {
    if (b->owner == &retired) b->owner = &idle_;
  }
  put_event(retired.retire_event);
  retired.retire_event = nullptr;
  return true;
}

void caching_state::release_stream(CUstream_st* handle) noexcept {
  try {
    std::lock_guard lock{mutex_};
    // Blocks freed on it that wait in per-thread caches.
    std::vector<std::shared_ptr<thread_cache>> caches;
    {
      std::lock_guard registry{registry_mutex_};
      caches = caches_;
    }
    drained_list drained;
    for (auto& c : caches) {
      std::lock_guard cache_lock{c->lock};
      if (c->dead) continue;
      c->bins.drain_stream(handle, [&](CUstream_st* s, block* b) {
        drained.emplace_back(s, b);
        c->cached_bytes -= b->size;
      });
    }
    for (auto [s, b] : drained) return_cached(b, s);
    // Uses declared on it: record now what will have to pass.
    for (block* b : with_uses_) {
      auto use = std::find(b->uses.begin(), b->uses.end(), handle);
      if (use == b->uses.end()) continue;
      CUevent_st* e = get_event();
      try {
        record(e, handle);
      } catch (...) {
        put_event(e);
        throw;
      }
      b->uses.erase(use);
      b->events.push_back(e);
    }
    auto it = pools_.find(handle);
    if (it == pools_.end()) return;
    std::unique_ptr<stream_pool> pool = std::move(it->second);
    pools_.erase(it);
    if (last_pool_ == pool.get()) last_pool_ = nullptr;
    pool->kind = stream_pool::role::retired;
    retired_.push_back(std::move(pool));
    stream_pool& retired = *retired_.back();
    retired.retire_event = get_event();
    try {
      record(retired.retire_event, handle);
    } catch (const std::exception& e) {
      syncmem::detail::report_failure(e, "{}: recording an event on a stream being destroyed failed ({}); waiting for "
                                      "the device instead",
                                      name_, e.what());
      device_guard guard{device_};
      backend_.synchronize_device(index_);
      put_event(retired.retire_event);
      retired.retire_event = nullptr;
      if (merge_into_idle(retired)) retired_.pop_back();
    }
  } catch (const std::exception& e) {
    try {
      syncmem::detail::report_failure(e, "{}: releasing stream {} failed: {}", name_, hex(handle), e.what());
    } catch (...) {  // NOLINT(bugprone-empty-catch)
    }
  }
}

void caching_state::record_stream(void* p, stream_view s) {
  SYNCMEM_EXPECTS(s.device() == device_,
                  fmt::format("{}: record_stream with a stream of {}; streams must belong to {}", name_,
                              to_string(s.device()), to_string(device_)));
  std::lock_guard lock{mutex_};
  block* const b = live_.find(reinterpret_cast<std::uintptr_t>(p));
  SYNCMEM_EXPECTS(b != nullptr,
                  fmt::format("{}: record_stream of {}, which is not a live allocation of this resource", name_, p));
  with_uses_.insert(b);
  if (std::find(b->uses.begin(), b->uses.end(), s.native_handle()) == b->uses.end()) {
    b->uses.push_back(s.native_handle());
  }
  b->needs_slow_free.store(true, std::memory_order_release);
}

// ==== giving memory back ======================================================

std::size_t caching_state::trim(std::size_t max_cached_bytes) {
  std::lock_guard lock{mutex_};
  flush_caches(true);
  process_pending();
  return release_free(max_cached_bytes);
}

std::size_t caching_state::release_free(std::size_t max_cached_bytes) {
  std::size_t released = 0;
  if (free_bytes() <= max_cached_bytes) return 0;
  if (range_ != nullptr) released += reclaim_pages(free_bytes() - max_cached_bytes, /*keep_handles=*/false);
  for (auto* seg : idle_segments()) {
    if (free_bytes() <= max_cached_bytes) break;
    released += drop_segment(*seg);
  }
  return released;
}

std::size_t caching_state::release_idle_segments() {
  auto idle = idle_segments();
  // Oversize blocks (max_split_mb) are kept for the large requests they serve.
  std::erase_if(idle, [this](const segment* seg) {
    return seg->kind == pool_kind::large && seg->size > options_.max_split_size;
  });
  std::size_t idle_bytes = 0;
  for (const auto* seg : idle) idle_bytes += seg->size;
  if (idle_bytes == 0 || idle_bytes < reserved_ / release_share_segments) return 0;
  std::size_t released = 0;
  for (auto* seg : idle) released += drop_segment(*seg);
  return released;
}

std::vector<segment*> caching_state::idle_segments() const {
  std::vector<segment*> idle;
  for (const auto& [base, seg] : segments_) {
    bool all_free = true;
    for (const block* b = seg->first; b != nullptr; b = b->next) {
      if (b->status != block_status::free) {
        all_free = false;
        break;
      }
    }
    if (all_free) idle.push_back(seg.get());
  }
  std::sort(idle.begin(), idle.end(), [](const segment* a, const segment* b) { return a->size > b->size; });
  return idle;
}

std::size_t caching_state::drop_segment(segment& seg) {
  if (upstream_ != nullptr) {
    // cudaFree waits for the device; an upstream may not: work freed on
    // streams may still use the memory.
    device_guard guard{device_};
    backend_.synchronize_device(index_);
  }
  for (block* b = seg.first; b != nullptr;) {
    block* const next = b->next;
    b->owner->index(seg.kind).remove(b);
    blocks_.release(b);
    b = next;
  }
  seg.first = nullptr;
  const std::size_t released = release_segment(seg);
  segments_.erase(seg.base);
  return released;
}

std::size_t caching_state::release_segment(segment& seg) noexcept {
  try {
    if (upstream_ != nullptr) {
      upstream_->deallocate(reinterpret_cast<void*>(seg.base), seg.size, default_stream(device_));
    } else {
      device_guard guard{device_};
      backend_.deallocate(index_, reinterpret_cast<void*>(seg.base), seg.size);
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): the device is gone
  }
  reserved_ -= seg.size;
  ++segment_releases_;
  return seg.size;
}

void caching_state::set_limit(std::optional<std::size_t> limit_bytes) noexcept {
  limit_.store(limit_bytes.value_or(none), std::memory_order_relaxed);
}

bool caching_state::exceeds_limit(std::size_t more) const noexcept {
  const std::size_t limit = limit_.load(std::memory_order_relaxed);
  return limit != none && (more > limit || reserved_ > limit - more);
}

std::size_t caching_state::free_bytes() const noexcept {
  std::size_t bytes = idle_.small.bytes() + idle_.large.bytes();
  for (const auto& entry : pools_) bytes += entry.second->small.bytes() + entry.second->large.bytes();
  for (const auto& p : retired_) bytes += p->small.bytes() + p->large.bytes();
  return bytes;
}

std::size_t caching_state::largest_free() const noexcept {
  std::size_t best = std::max(idle_.small.largest(), idle_.large.largest());
  for (const auto& entry : pools_) best = std::max({best, entry.second->small.largest(), entry.second->large.largest()});
  for (const auto& p : retired_) best = std::max({best, p->small.largest(), p->large.largest()});
  return best;
}

// ==== events ==================================================================

CUevent_st* caching_state::get_event() {
  if (!spare_events_.empty()) {
    CUevent_st* e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  device_guard guard{device_};
  CUevent_st* e = backend_.create_event(index_, false, false);
  try {
    all_events_.push_back(e);
    spare_events_.reserve(all_events_.size());  // so that put_event never allocates
  } catch (...) {
    if (!all_events_.empty() && all_events_.back() == e) all_events_.pop_back();
    backend_.destroy_event(index_, e);
    throw;
  }
  return e;
}

void caching_state::put_event(CUevent_st* e) noexcept {
  if (e != nullptr && spare_events_.size() < spare_events_.capacity()) spare_events_.push_back(e);
}

void caching_state::record(CUevent_st* e, CUstream_st* s) {
  device_guard guard{device_};
  backend_.record_event(index_, e, s);
}

bool caching_state::passed(CUevent_st* e) { return e == nullptr || backend_.event_ready(index_, e); }

// ==== statistics and snapshots ================================================

caching_state::totals caching_state::current_totals() const {
  totals t{allocated_.load(std::memory_order_relaxed),
           requested_.load(std::memory_order_relaxed),
           live_count_.load(std::memory_order_relaxed),
           allocations_,
           deallocations_,
           thread_hits_,
           0};
  std::lock_guard lock{registry_mutex_};
  for (const auto& c : caches_) {
    t.allocated += c->allocated_delta.load(std::memory_order_relaxed);
    t.requested += c->requested_delta.load(std::memory_order_relaxed);
    t.live += c->live_delta.load(std::memory_order_relaxed);
    t.allocations += c->allocations.load(std::memory_order_relaxed);
    t.deallocations += c->deallocations.load(std::memory_order_relaxed);
    t.thread_hits += c->hits.load(std::memory_order_relaxed);
    std::lock_guard cache_lock{c->lock};
    t.thread_cached += c->cached_bytes;
  }
  return t;
}

caching_statistics caching_state::statistics() {
  std::lock_guard lock{mutex_};
  const totals t = current_totals();
  caching_statistics s;
  s.allocated_bytes = non_negative(t.allocated);
  s.peak_allocated_bytes = std::max(s.allocated_bytes, non_negative(peak_allocated_.load(std::memory_order_relaxed)));
  s.requested_bytes = non_negative(t.requested);
  s.peak_requested_bytes = std::max(s.requested_bytes, non_negative(peak_requested_.load(std::memory_order_relaxed)));
  s.reserved_bytes = reserved_;
  s.peak_reserved_bytes = peak_reserved_;
  s.cached_bytes = free_bytes() + t.thread_cached;
  s.pending_bytes = pending_bytes_;
  s.largest_free_block = largest_free();
  s.live_allocations = non_negative(t.live);
  s.allocations = t.allocations;
  s.deallocations = t.deallocations;
  s.thread_cache_hits = t.thread_hits;
  s.cache_hits = central_hits_ + t.thread_hits;
  s.cache_misses = misses_;
  s.splits = splits_;
  s.merges = merges_;
  s.segments = segments_.size() + (mapped_pages_ > 0 ? 1 : 0);
  s.segment_allocations = segment_allocations_;
  s.segment_releases = segment_releases_;
  s.stream_waits = stream_waits_;
  s.oom_retries = oom_retries_;
  s.ooms = ooms_;
  return s;
}

void caching_state::reset_peaks() {
  std::lock_guard lock{mutex_};
  const totals t = current_totals();
  peak_allocated_.store(t.allocated, std::memory_order_relaxed);
  peak_requested_.store(t.requested, std::memory_order_relaxed);
  peak_reserved_ = reserved_;
}

allocator_snapshot caching_state::snapshot() {
  std::lock_guard lock{mutex_};
  flush_caches(true);
  process_pending();
  allocator_snapshot snap;
  snap.device = to_string(device_);
  snap.resource = name_;
  snap.captured_at = utc_now();
  snap.reserved = reserved_;
  auto pool_stream = [](const stream_pool* pool) {
    return pool != nullptr && pool->kind == stream_pool::role::live ? hex(pool->stream) : std::string{"none"};
  };
  auto describe = [&](const block* b, std::uintptr_t base) {
    allocator_snapshot::block out;
    out.offset = b->ptr - base;
    out.size = b->size;
    switch (b->status) {
      case block_status::allocated:
        out.state = block_state::allocated;
        out.requested = b->requested.load(std::memory_order_relaxed);
        out.label = label_text(b->label.load(std::memory_order_relaxed));
        out.stream = hex(b->stream.load(std::memory_order_relaxed));
        snap.allocated += b->size;
        break;
      case block_status::pending:
        out.state = block_state::pending;
        out.stream = pool_stream(b->owner);
        snap.pending += b->size;
        break;
      default:
        out.state = block_state::free;
        out.stream = pool_stream(b->owner);
        snap.free += b->size;
        break;
    }
    return out;
  };
  for (const auto& [base, seg] : segments_) {
    allocator_snapshot::segment out;
    out.address = base;
    out.size = seg->size;
    out.stream = hex(seg->stream);
    out.pool = seg->kind == pool_kind::small ? "small" : "large";
    for (const block* b = seg->first; b != nullptr; b = b->next) out.blocks.push_back(describe(b, base));
    snap.segments.push_back(std::move(out));
  }
  if (range_ != nullptr) {
    // Each run of mapped pages shows as a segment of its own.
    bool in_run = false;
    for (const block* b = range_->first; b != nullptr; b = b->next) {
      if (b->status == block_status::unmapped) {
        in_run = false;
        continue;
      }
      if (!in_run) {
        allocator_snapshot::segment run;
        run.address = b->ptr;
        run.stream = "none";
        run.pool = "expandable";
        snap.segments.push_back(std::move(run));
        in_run = true;
      }
      auto& run = snap.segments.back();
      run.blocks.push_back(describe(b, run.address));
      run.size += b->size;
    }
  }
  std::sort(snap.segments.begin(), snap.segments.end(),
            [](const auto& a, const auto& b) { return a.address < b.address; });
  return snap;
}

// ==== the growable range ======================================================

bool caching_state::growable_ready() {
  if (!options_.expandable) return false;
  if (range_ != nullptr) return true;
  if (growable_tried_) return false;
  growable_tried_ = true;
  auto& log = syncmem::detail::logger();
  try {
    device_guard guard{device_};
    backend_.make_current(index_);  // the driver's virtual memory calls need the context current on this thread
    const std::size_t page = backend_.vmm_granularity(index_);
    if (page == 0) {
      log.info("{}: {} has no virtual memory management; growable segments are off", name_, to_string(device_));
      return false;
    }
    const std::size_t total = backend_.memory(index_).total;
    const std::size_t size = round_up(2 * total, page);  // twice the memory: room for holes
    auto seg = std::make_unique<segment>();
    block* u = blocks_.make();
    std::vector<syncmem::detail::physical_handle> pages(size / page, 0);
    void* base = nullptr;
    try {
      base = backend_.vmm_reserve(index_, size);
    } catch (...) {
      blocks_.release(u);
      throw;
    }
    seg->base = reinterpret_cast<std::uintptr_t>(base);
    seg->size = size;
    seg->kind = pool_kind::large;
    seg->growable = true;
    seg->first = u;
    u->ptr = seg->base;
    u->size = size;
    u->seg = seg.get();
    u->status = block_status::unmapped;
    unmapped_.insert(u);
    pages_ = std::move(pages);
    page_size_ = page;
    range_ = std::move(seg);
    growable_in_use_.store(true, std::memory_order_relaxed);
    return true;
  } catch (const std::exception& e) {
    log.warn("{}: growable segments are off: {}", name_, e.what());
    return false;
  }
}

caching_state::block* caching_state::grow_growable(std::size_t key, stream_pool& pool) {
  const std::size_t page = page_size_;
  // Where: after a free block of this pool, growing it; else at the start of
  // the hole that needs the fewest pages (the smallest, among equals).
  block* hole = nullptr;
  block* extended = nullptr;
  std::size_t need = 0;
  auto choose = [&]() -> block* {
    hole = extended = nullptr;
    need = 0;
    for (block* u : unmapped_) {
      block* const before = u->prev;
      const bool extend = before != nullptr && before->status == block_status::free && before->owner == &pool;
      const std::size_t have = extend ? before->size : 0;
      if (extend && have >= key) return before;  // fits already (missed by the index's bounded scan)
      const std::size_t n = round_up(key - have, page);
      if (n > u->size) continue;
      if (hole == nullptr || n < need) {
        hole = u;
        extended = extend ? before : nullptr;
        need = n;
      }
    }
    return nullptr;
  };
  auto take_whole = [&](block* b) {
    pool.large.remove(b);
    split(b, key, pool, pool_kind::large);
    return b;
  };
  if (block* fits = choose()) return take_whole(fits);
  // Pages idle elsewhere in the range move here rather than new memory being
  // made, when there are enough of them that the work has moved on (a
  // quarter of what is reserved). That only widens the holes, so the choice
  // made again is as good.
  const std::size_t wanted = hole != nullptr ? need : round_up(key, page);
  if (options_.release_before_grow && spare_pages_.size() * page < wanted &&
      idle_pages(extended) >= std::max(page, reserved_ / release_share_pages)) {
    reclaim_pages(wanted - spare_pages_.size() * page, /*keep_handles=*/true, extended);
    if (block* fits = choose()) {
      release_spares();
      return take_whole(fits);
    }
  }
  if (hole == nullptr) {
    release_spares();
    return nullptr;  // the address range is full of holes: handled as out of memory
  }
  const std::size_t count = need / page;
  std::vector<syncmem::detail::physical_handle> handles;
  block* m = nullptr;
  try {
    handles.reserve(count);
    m = blocks_.make();
  } catch (...) {
    release_spares();
    throw;
  }
  auto give_up = [&] {
    for (auto h : handles) spare_pages_.push_back(h);  // reserved above: no allocation
    release_spares();
    blocks_.release(m);
  };
  spare_pages_.reserve(spare_pages_.size() + count);
  while (handles.size() < count && !spare_pages_.empty()) {
    handles.push_back(spare_pages_.back());
    spare_pages_.pop_back();
  }
  if (exceeds_limit((count - handles.size()) * page)) {
    limit_hit_ = true;
    give_up();
    return nullptr;
  }
  const std::uintptr_t at = hole->ptr;
  const std::size_t first_page = (at - range_->base) / page;
  std::size_t mapped = 0;
  try {
    device_guard guard{device_};
    backend_.make_current(index_);
    while (handles.size() < count) {
      const auto h = backend_.vmm_create(index_, page);
      if (h == 0) {
        give_up();
        return nullptr;
      }
      handles.push_back(h);
      reserved_ += page;
      peak_reserved_ = std::max(peak_reserved_, reserved_);
    }
    for (; mapped < count; ++mapped) {
      backend_.vmm_map(index_, reinterpret_cast<void*>(at + mapped * page), page, handles[mapped]);
      pages_[first_page + mapped] = handles[mapped];
    }
    mapped_pages_ += count;
  } catch (...) {
    for (std::size_t i = 0; i < mapped; ++i) {
      backend_.vmm_unmap(index_, reinterpret_cast<void*>(at + i * page), page);
      pages_[first_page + i] = 0;
    }
    give_up();
    throw;
  }
  unmapped_.erase(hole);
  m->ptr = at;
  m->size = need;
  m->seg = range_.get();
  link_before(hole, m);
  hole->ptr += need;
  hole->size -= need;
  if (hole->size == 0) {
    unlink_from_segment(hole);
    blocks_.release(hole);
  } else {
    unmapped_.insert(hole);
  }
  release_spares();
  ++segment_allocations_;
  block* const b = free_block(m, pool);  // joins the free block of this pool before it
  pool.large.remove(b);
  split(b, key, pool, pool_kind::large);
  return b;
}

std::size_t caching_state::idle_pages(const block* keep_whole) const noexcept {
  std::size_t bytes = 0;
  for (const block* b = range_->first; b != nullptr; b = b->next) {
    if (b->status != block_status::free || b == keep_whole) continue;
    const std::size_t start = round_up(b->ptr, page_size_);
    const std::size_t end = round_down(b->end(), page_size_);
    if (end > start) bytes += end - start;
  }
  return bytes;
}

std::size_t caching_state::reclaim_pages(std::size_t wanted, bool keep_handles, const block* keep_whole) {
  if (range_ == nullptr || wanted == 0) return 0;
  const std::size_t page = page_size_;
  std::vector<block*> candidates;
  std::size_t reclaimable = 0;
  for (block* b = range_->first; b != nullptr; b = b->next) {
    if (b->status != block_status::free) continue;
    if (b == keep_whole) continue;  // the block that growth extends
    const std::size_t start = round_up(b->ptr, page);
    const std::size_t end = round_down(b->end(), page);
    if (end > start) {
      candidates.push_back(b);
      reclaimable += end - start;
    }
  }
  if (reclaimable < page) return 0;
  {
    // Free pages may still be used by work enqueued before their free.
    device_guard guard{device_};
    backend_.synchronize_device(index_);
  }
  std::size_t done = 0;
  // From the top of the range down: memory stays packed at its start. A
  // block is only split or released by its own turn, so the later (lower)
  // candidates stay valid.
  for (auto it = candidates.rbegin(); it != candidates.rend() && done < wanted; ++it) {
    done += unmap_pages(*it, wanted - done, keep_handles);
  }
  return done;
}

std::size_t caching_state::unmap_pages(block* b, std::size_t wanted, bool keep_handles) {
  const std::size_t page = page_size_;
  const std::uintptr_t aligned_start = round_up(b->ptr, page);
  const std::uintptr_t aligned_end = round_down(b->end(), page);
  if (aligned_end <= aligned_start) return 0;
  const std::size_t n = std::min((aligned_end - aligned_start) / page, (wanted + page - 1) / page);
  const std::uintptr_t start = aligned_end - n * page;
  const std::uintptr_t end = b->end();
  // The guard, every record and slot first, so that nothing fails once pages are unmapped.
  device_guard guard{device_};
  backend_.make_current(index_);
  block* middle = blocks_.make();
  block* tail = nullptr;
  try {
    if (end > aligned_end) tail = blocks_.make();
    if (keep_handles) spare_pages_.reserve(spare_pages_.size() + n);
  } catch (...) {
    blocks_.release(middle);
    throw;
  }
  stream_pool& owner = *b->owner;
  owner.large.remove(b);
  middle->ptr = start;
  middle->size = aligned_end - start;
  middle->seg = range_.get();
  middle->status = block_status::unmapped;
  link_after(b, middle);
  if (tail != nullptr) {
    tail->ptr = aligned_end;
    tail->size = end - aligned_end;
    tail->seg = range_.get();
    tail->status = block_status::free;
    tail->owner = &owner;
    link_after(middle, tail);
    owner.large.insert(tail);
  }
  if (start > b->ptr) {
    b->size = start - b->ptr;
    owner.large.insert(b);
  } else {
    unlink_from_segment(b);
    blocks_.release(b);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::uintptr_t address = start + i * page;
    const std::size_t slot = (address - range_->base) / page;
    backend_.vmm_unmap(index_, reinterpret_cast<void*>(address), page);
    const auto handle = pages_[slot];
    pages_[slot] = 0;
    --mapped_pages_;
    if (keep_handles) {
      spare_pages_.push_back(handle);
    } else {
      backend_.vmm_release(index_, handle, page);
      reserved_ -= page;
    }
  }
  add_unmapped(middle);
  ++segment_releases_;
  return n * page;
}

void caching_state::add_unmapped(block* m) {
  if (block* prev = m->prev; prev != nullptr && prev->status == block_status::unmapped) {
    unmapped_.erase(prev);
    prev->size += m->size;
    unlink_from_segment(m);
    blocks_.release(m);
    m = prev;
  }
  if (block* next = m->next; next != nullptr && next->status == block_status::unmapped) {
    unmapped_.erase(next);
    m->size += next->size;
    unlink_from_segment(next);
    blocks_.release(next);
  }
  unmapped_.insert(m);
}

void caching_state::release_spares() noexcept {
  if (spare_pages_.empty()) return;
  try {
    device_guard guard{device_};
    for (auto h : spare_pages_) {
      backend_.vmm_release(index_, h, page_size_);
      reserved_ -= page_size_;
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): the device is gone
  }
  spare_pages_.clear();
}

}  // namespace syncmem::mr::detail
