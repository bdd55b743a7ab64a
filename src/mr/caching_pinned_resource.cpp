#include "syncmem/mr/caching_pinned_resource.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/event_pool.hpp"
#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "mr/caching/use_queues.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr {

namespace {

constexpr std::size_t page = 4096;
constexpr std::size_t small_limit = std::size_t{32} << 10;
// Classes up to 32 KiB are pages (indices 0..7); above, 8 per power of two
// for powers 2^15 .. 2^63.
constexpr std::size_t bin_count = 8 + 49 * 8;

std::size_t class_index(std::size_t size) noexcept {
  if (size <= small_limit) return size / page - 1;
  const auto k = static_cast<std::size_t>(std::bit_width(size)) - 1;
  const std::size_t m = size >> (k - 3);  // 8..15
  return 8 + (k - 15) * 8 + (m - 8);
}

device_id home_device_of(device_kind backend) { return device_id{backend, 0}; }

void wait_quietly(stream_view s) noexcept {
  try {
    s.synchronize();
  } catch (...) {
    // the device is gone
    syncmem::detail::log_ignored("waiting for a stream");
  }
}

// A new pinned block from the upstream; nullptr when it has no memory.
void* pin(memory_resource& upstream, std::size_t size, stream_view stream) {
  try {
    return upstream.allocate(size, stream, page);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

// The name is formatted only here, off the path of a correct free.
void report_unknown_free(const std::string& resource, const char* call, void* p, std::size_t bytes) {
  syncmem::detail::logger().error("{}: {} of {} ({} bytes), which it did not hand out or which was freed already",
                                  resource, call, p, bytes);
}

// The uses of pinned blocks complete with events of syncmem's event pool, on
// any device.
struct pooled_events {
  using event_type = event;

  static bool passed(const event& e) noexcept {
    try {
      return e.ready();
    } catch (...) {
      syncmem::detail::log_ignored("asking whether a pinned block's last use completed");
      // The device failed for good (a sticky error): nothing runs on it any
      // more, so nothing can still be using the block.
      return true;
    }
  }
  static void wait(const event& e) noexcept {
    try {
      e.synchronize();
    } catch (...) {
      // the device is gone; nothing runs on it
      syncmem::detail::log_ignored("waiting for the uses of pinned blocks");
    }
  }
  static void release(event&& e) noexcept { syncmem::detail::event_pool::instance().release_completed(std::move(e)); }
};

}  // namespace

struct caching_pinned_resource::state {
  struct block {
    void* p;
    std::size_t size;
    bool pinned;
    std::uint32_t pending_uses = 0;
    // Streams declared with record_stream. A syncmem::stream destroyed since
    // finished its work, and its handle may belong to a new stream by now.
    std::vector<syncmem::detail::stream_identity> recorded;

    // The streams declared with record_stream that are still alive; forgets
    // them all. Out of memory for the list, it waits for them instead.
    std::vector<stream_view> take_recorded() noexcept {
      std::vector<stream_view> uses;
      try {
        for (const auto& r : recorded) {
          if (r.usable()) uses.push_back(r.view());
        }
      } catch (...) {
        syncmem::detail::log_ignored("collecting the streams that used a pinned block");
        uses.clear();
        for (const auto& r : recorded) {
          if (r.usable()) wait_quietly(r.view());
        }
      }
      recorded.clear();
      return uses;
    }
  };
  device_id home;  // whose default stream upstream calls without a caller's stream use
  std::mutex mutex;
  std::array<std::vector<block*>, bin_count> bins;
  std::unordered_map<void*, block*> live;
  // Uses of freed blocks that must complete before they are cached again.
  mr::detail::caching::use_queues<block, pooled_events> pending{pooled_events{}};
  caching_pinned_statistics stats;
  std::atomic<bool> warned{false};

  explicit state(device_id h) : home{h} { live.reserve(256); }

  // Under `mutex`: the live block at `p`, no longer live; null when it was not
  // handed out or was freed already.
  block* take_live(void* p) {
    auto it = live.find(p);
    if (it == live.end()) return nullptr;
    block* b = it->second;
    live.erase(it);
    stats.bytes_in_use -= b->size;
    return b;
  }

  // Under `mutex`. A block whose uses have all completed: cached, or (pageable
  // fallback, or over the cache limit) handed to `doomed` to be freed after
  // the lock is released.
  void ready(block* b, std::size_t max_cached, std::vector<block*>& doomed) {
    if (!b->pinned || stats.bytes_cached + b->size > max_cached) {
      doomed.push_back(b);
      (b->pinned ? stats.bytes_pinned : stats.bytes_pageable) -= b->size;
      return;
    }
    bins[class_index(b->size)].push_back(b);
    stats.bytes_cached += b->size;
  }

  // Under `mutex`: moves the blocks whose uses have completed out of pending.
  // Never blocks.
  void poll(std::size_t max_cached, std::vector<block*>& doomed) {
    pending.poll([&](block* b) {
      stats.bytes_pending -= b->size;
      --stats.blocks_pending;
      ready(b, max_cached, doomed);
    });
  }

  // Under `mutex`: `b` has been freed; its uses are the streams in `streams`.
  void retire(block* b, const std::vector<stream_view>& streams, std::size_t max_cached,
              std::vector<block*>& doomed) noexcept {
    for (const stream_view s : streams) {
      try {
        // A stream with nothing left to run holds no use of the block: one
        // query now saves an event, and the block is ready at once.
        if (s.ready()) continue;
        event e = syncmem::detail::event_pool::instance().acquire(s.device());
        e.record(s);
        pending.add({s.device(), s.handle()}, std::move(e), b);
      } catch (...) {
        syncmem::detail::log_ignored("recording an event after a pinned block's use");
        // No event: wait for the stream instead, so the block is safe to reuse.
        try {
          s.synchronize();
        } catch (...) {
          // the device is gone; nothing runs on it
          syncmem::detail::log_ignored("waiting for a stream that used a pinned block");
        }
      }
    }
    if (b->pending_uses == 0) {
      ready(b, max_cached, doomed);
    } else {
      stats.bytes_pending += b->size;
      ++stats.blocks_pending;
    }
  }

  // A cached block of `size` bytes, handed out; nullptr when none is ready.
  void* take_cached(memory_resource& upstream, std::size_t size, std::size_t max_cached) {
    std::vector<block*> doomed;
    void* hit = nullptr;
    {
      std::lock_guard lock{mutex};
      auto& bin = bins[class_index(size)];
      if (bin.empty() && !pending.empty()) poll(max_cached, doomed);
      if (!bin.empty()) {
        block* b = bin.back();
        live.emplace(b->p, b);  // may throw: nothing has changed yet
        bin.pop_back();
        stats.bytes_cached -= size;
        stats.bytes_in_use += size;
        ++stats.allocations;
        ++stats.hits;
        hit = b->p;
      }
    }
    free_blocks(upstream, doomed);  // over the cache limit, or pageable fallbacks
    return hit;
  }

  // Pageable memory in place of pinned memory that could not be had, with a warning the first time.
  void* pageable(std::size_t size, const std::string& name) {
    void* p = ::operator new (size, std::align_val_t{page}, std::nothrow);
    if (p != nullptr && !warned.exchange(true)) {
      syncmem::detail::logger().warn(
          "{}: pinning {} failed (page-locked memory limit, see ulimit -l, or host memory "
          "exhausted); serving pageable memory instead, which transfers more slowly. This "
          "warning is given once.",
          name, syncmem::detail::format_bytes(size));
    }
    return p;
  }

  // Books a new block, handed out; gives the memory back if that fails.
  void add_block(memory_resource& upstream, void* p, std::size_t size, bool pinned, stream_view stream) {
    auto* b = new (std::nothrow) block{p, size, pinned, 0, {}};
    try {
      if (b == nullptr) throw std::bad_alloc{};
      std::lock_guard lock{mutex};
      live.emplace(p, b);
      ++stats.allocations;
      ++stats.misses;
      stats.bytes_in_use += size;
      if (pinned) {
        stats.bytes_pinned += size;
        stats.peak_bytes_pinned = std::max(stats.peak_bytes_pinned, stats.bytes_pinned);
      } else {
        ++stats.fallbacks;
        stats.bytes_pageable += size;
      }
    } catch (...) {
      delete b;
      if (pinned) {
        upstream.deallocate(p, size, stream, page);
      } else {
        ::operator delete (p, std::align_val_t{page});
      }
      throw;
    }
  }

  [[noreturn]] void throw_out_of_memory(std::size_t bytes, std::string name, const caching_pinned_options& options) {
    oom_info info;
    info.requested = bytes;
    info.label = std::string{current_allocation_label()};
    info.resource = std::move(name);
    {
      std::lock_guard lock{mutex};
      info.reserved = stats.bytes_pinned;
      info.in_use = stats.bytes_in_use;
    }
    info.hint = options.fallback_to_pageable
                    ? "neither pinned nor pageable host memory could be had"
                    : "pinning host memory failed: the page-locked memory limit (ulimit -l) or host memory is "
                      "exhausted; caching_pinned_options::fallback_to_pageable would serve pageable memory instead";
    SYNCMEM_OUT_OF_MEMORY(std::move(info));
  }

  // Not under `mutex` (unpinning waits for the device): frees blocks taken
  // out of the books already.
  void free_blocks(memory_resource& upstream, std::vector<block*>& doomed) noexcept {
    if (doomed.empty()) return;
    try {
      const stream_view s = default_stream(home);
      for (auto* b : doomed) {
        if (b->pinned) {
          upstream.deallocate(b->p, b->size, s, page);
        } else {
          ::operator delete (b->p, std::align_val_t{page});
        }
        delete b;
      }
    } catch (...) {
      // default_stream cannot fail for a device that existed
      syncmem::detail::log_ignored("freeing pinned blocks");
    }
    doomed.clear();
  }
};

caching_pinned_resource::caching_pinned_resource(device_kind backend, caching_pinned_options options)
    : memory_resource{memory_kind::pinned_host, std::nullopt, page},
      owned_upstream_{std::make_unique<pinned_resource>(backend, options.flags)},
      upstream_{owned_upstream_.get()},
      options_{options},
      state_{std::make_unique<state>(home_device_of(backend))} {
  reserve_up_front();
}

caching_pinned_resource::caching_pinned_resource(memory_resource& upstream, caching_pinned_options options)
    : memory_resource{memory_kind::pinned_host, std::nullopt, page}, upstream_{&upstream}, options_{options} {
  SYNCMEM_EXPECTS(upstream.kind() == memory_kind::pinned_host && !upstream.device().has_value(),
                  fmt::format("caching_pinned_resource: the upstream {} hands out {} memory; it must hand out "
                              "pinned host memory",
                              upstream.name(), to_string(upstream.kind())));
  SYNCMEM_EXPECTS(upstream.max_alignment() >= page,
                  fmt::format("caching_pinned_resource: the upstream {} aligns to at most {} bytes; blocks need {}",
                              upstream.name(), upstream.max_alignment(), page));
  state_ = std::make_unique<state>(current_device());
  reserve_up_front();
}

void caching_pinned_resource::reserve_up_front() {
  if (options_.reserve_blocks == 0) return;
  try {
    reserve(options_.reserve_block_bytes, options_.reserve_blocks);
  } catch (...) {
    trim();  // the destructor will not run: unpin what was reserved
    throw;
  }
}

caching_pinned_resource::~caching_pinned_resource() {
  std::vector<state::block*> blocks;
  std::size_t still_live = 0;
  std::size_t still_live_bytes = 0;
  {
    std::lock_guard lock{state_->mutex};
    state_->pending.drain([&blocks](state::block* b) { blocks.push_back(b); });
    for (auto& bin : state_->bins) {
      blocks.insert(blocks.end(), bin.begin(), bin.end());
      bin.clear();
    }
    for (auto& [p, b] : state_->live) {
      ++still_live;
      still_live_bytes += b->size;
      blocks.push_back(b);
    }
    state_->live.clear();
  }
  if (still_live > 0) {
    syncmem::detail::logger().warn("{} destroyed with {} block(s) ({}) still allocated; they are freed now", name(),
                                   still_live, syncmem::detail::format_bytes(still_live_bytes));
  }
  state_->free_blocks(*upstream_, blocks);
}

std::string caching_pinned_resource::name() const {
  return fmt::format("caching_pinned_resource({})", upstream_->name());
}

std::size_t caching_pinned_resource::block_size(std::size_t bytes) noexcept {
  if (bytes == 0) return 0;
  if (bytes <= small_limit) return (bytes + page - 1) / page * page;
  const auto k = static_cast<std::size_t>(std::bit_width(bytes)) - 1;
  const std::size_t step = std::size_t{1} << (k - 3);
  if (bytes > std::numeric_limits<std::size_t>::max() - (step - 1)) return std::numeric_limits<std::size_t>::max();
  return (bytes + step - 1) / step * step;
}

void* caching_pinned_resource::do_allocate(std::size_t bytes, stream_view stream, std::size_t) {
  const std::size_t size = block_size(bytes);
  auto& st = *state_;
  // block_size saturates for a size no block can have: nothing to look up or pin.
  if (size == std::numeric_limits<std::size_t>::max()) st.throw_out_of_memory(bytes, name(), options_);
  if (void* hit = st.take_cached(*upstream_, size, options_.max_cached_bytes)) return hit;
  // A miss: pin a new block, outside the lock (cudaHostAlloc takes milliseconds).
  void* p = pin(*upstream_, size, stream);
  if (p == nullptr && trim() > 0)
    p = pin(*upstream_, size, stream);  // cached blocks count against the page-locked limit
  const bool pinned = p != nullptr;
  if (!pinned && options_.fallback_to_pageable) p = st.pageable(size, name());
  if (p == nullptr) st.throw_out_of_memory(bytes, name(), options_);
  st.add_block(*upstream_, p, size, pinned, stream);
  return p;
}

void caching_pinned_resource::do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t) noexcept {
  auto& st = *state_;
  std::vector<state::block*> doomed;
  {
    std::lock_guard lock{st.mutex};
    state::block* b = st.take_live(p);
    if (b == nullptr) return report_unknown_free(name(), "deallocate", p, bytes);
    std::vector<stream_view> uses = b->take_recorded();
    if (std::find(uses.begin(), uses.end(), stream) == uses.end()) {
      try {
        uses.push_back(stream);
      } catch (...) {
        // out of memory: order the reuse by waiting instead
        syncmem::detail::log_ignored("remembering the stream of a pinned block's free");
        wait_quietly(stream);
      }
    }
    st.retire(b, uses, options_.max_cached_bytes, doomed);
  }
  st.free_blocks(*upstream_, doomed);
}

void caching_pinned_resource::deallocate_host_only(void* p, std::size_t bytes, std::size_t) noexcept {
  if (p == nullptr) return;
  auto& st = *state_;
  std::vector<state::block*> doomed;
  {
    std::lock_guard lock{st.mutex};
    state::block* b = st.take_live(p);
    if (b == nullptr) return report_unknown_free(name(), "deallocate_host_only", p, bytes);
    std::vector<stream_view> uses = b->take_recorded();
    if (uses.empty()) {
      st.ready(b, options_.max_cached_bytes, doomed);
    } else {
      st.retire(b, uses, options_.max_cached_bytes, doomed);
    }
  }
  st.free_blocks(*upstream_, doomed);
}

void caching_pinned_resource::record_stream(void* p, stream_view s) {
  auto& st = *state_;
  std::lock_guard lock{st.mutex};
  auto it = st.live.find(p);
  SYNCMEM_EXPECTS(it != st.live.end(),
                  fmt::format("{}: record_stream of {}, which is not a block it handed out (or was freed)", name(), p));
  auto& recorded = it->second->recorded;
  if (std::none_of(recorded.begin(), recorded.end(), [&](const auto& r) { return r.is(s); })) {
    recorded.emplace_back().remember(s);
  }
}

void caching_pinned_resource::reserve(std::size_t block_bytes, std::size_t blocks) {
  if (block_bytes == 0 || blocks == 0) return;
  const std::size_t size = block_size(block_bytes);
  auto& st = *state_;
  const stream_view home = default_stream(st.home);
  for (std::size_t i = 0; i < blocks; ++i) {
    void* p = nullptr;
    try {
      p = upstream_->allocate(size, home, page);
    } catch (const std::bad_alloc&) {
      oom_info info;
      info.requested = size;
      info.label = std::string{current_allocation_label()};
      info.resource = name();
      info.hint = fmt::format(
          "reserving {} blocks of {}: pinning failed after {} blocks (page-locked memory "
          "limit, see ulimit -l)",
          blocks, syncmem::detail::format_bytes(size), i);
      SYNCMEM_OUT_OF_MEMORY(std::move(info));
    }
    auto* b = new (std::nothrow) state::block{p, size, true, 0, {}};
    if (b == nullptr) {
      upstream_->deallocate(p, size, home, page);
      throw std::bad_alloc{};
    }
    std::lock_guard lock{st.mutex};
    try {
      st.bins[class_index(size)].push_back(b);
    } catch (...) {
      delete b;
      upstream_->deallocate(p, size, home, page);
      throw;
    }
    st.stats.bytes_cached += size;
    st.stats.bytes_pinned += size;
    st.stats.peak_bytes_pinned = std::max(st.stats.peak_bytes_pinned, st.stats.bytes_pinned);
  }
}

std::size_t caching_pinned_resource::trim() noexcept {
  auto& st = *state_;
  std::vector<state::block*> doomed;
  std::size_t freed = 0;
  try {
    std::lock_guard lock{st.mutex};
    st.poll(options_.max_cached_bytes, doomed);
    for (auto& bin : st.bins) {
      for (auto* b : bin) {
        doomed.push_back(b);
        st.stats.bytes_cached -= b->size;
        st.stats.bytes_pinned -= b->size;
        freed += b->size;
      }
      bin.clear();
    }
  } catch (...) {
    // out of memory while collecting: free what was collected
    syncmem::detail::log_ignored("collecting cached pinned blocks to free");
  }
  st.free_blocks(*upstream_, doomed);
  return freed;
}

caching_pinned_statistics caching_pinned_resource::statistics() {
  auto& st = *state_;
  std::vector<state::block*> doomed;
  caching_pinned_statistics result;
  {
    std::lock_guard lock{st.mutex};
    st.poll(options_.max_cached_bytes, doomed);
    result = st.stats;
  }
  st.free_blocks(*upstream_, doomed);
  return result;
}

}  // namespace syncmem::mr
