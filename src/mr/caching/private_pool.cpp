#include "mr/caching/private_pool.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/capture_registry.hpp"
#include "core/ignored_failure.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"

namespace syncmem::mr::detail::caching {

namespace {

constexpr std::size_t block_rounding = 512;
constexpr std::size_t small_request = std::size_t{1} << 20;  // PyTorch's kSmallSize
constexpr std::size_t small_segment = std::size_t{2} << 20;  // PyTorch's kSmallBuffer
constexpr std::size_t segment_rounding = std::size_t{2} << 20;

std::size_t round_up(std::size_t bytes, std::size_t to) { return (bytes + to - 1) / to * to; }
std::size_t rounded(std::size_t bytes) { return round_up(std::max<std::size_t>(bytes, 1), block_rounding); }

std::byte* at(void* p, std::size_t offset) { return static_cast<std::byte*>(p) + offset; }

// Whether the block `b` (a block_map entry) starts where `a` ends, in the same segment.
template <class Entry>
bool adjacent(const Entry& a, const Entry& b) {
  return a.second.segment == b.second.segment && at(a.first, a.second.size) == b.first;
}

// The capture a free block was freed in, if still open; 0 if that capture has
// ended (it constrains nothing then: later captures reuse its blocks freely).
std::uint64_t open_capture(std::uint64_t freed_in) {
  return freed_in != 0 && syncmem::detail::capture_open(freed_in) ? freed_in : 0;
}

// The caching resource's accounts, while it lives; a pool that outlives it counts nowhere.
bool reserve(const std::weak_ptr<pool_accounts>& accounts, std::size_t bytes, bool segment) {
  const auto a = accounts.lock();
  return a == nullptr || a->reserve(bytes, segment);
}
void unreserve(const std::weak_ptr<pool_accounts>& accounts, std::size_t bytes, bool segment) {
  if (const auto a = accounts.lock()) a->unreserve(bytes, segment);
}

}  // namespace

private_pool::private_pool(device_id device, memory_resource* upstream, const syncmem::detail::graph_pool_state& owner,
                           std::string name, std::weak_ptr<pool_accounts> accounts,
                           std::shared_ptr<const graph_pool_observers> observers)
    : device_{device},
      upstream_{upstream},
      pool_id_{owner.id},
      usage_{owner.usage},
      name_{std::move(name)},
      accounts_{std::move(accounts)},
      observers_{std::move(observers)} {}

private_pool::~private_pool() {
  try {
    device_guard guard{device_};
    auto& backend = syncmem::detail::backend_for(device_);
    // cudaFree waits for the device itself; an emulated free and an unmap do not.
    if (!backend.traits().deallocate_waits_for_device || !heaps_.empty()) backend.synchronize_device(device_.index());
    for (const auto& [p, bytes] : segments_) {
      usage_->reserved.fetch_sub(bytes);
      if (bytes > 0) unreserve(accounts_, bytes, true);
      const bool growable = is_heap(p);
      if (bytes > 0) observers_->releasing(pool_id_, p, bytes, growable);
      if (growable) continue;
      if (upstream_ != nullptr) {
        upstream_->deallocate(p, bytes, default_stream(device_));
      } else {
        backend.deallocate(device_.index(), p, bytes);
      }
    }
    if (!heaps_.empty()) backend.make_current(device_.index());
    for (const auto& [s, h] : heaps_) {
      syncmem::detail::vmm_capability* const vmm = backend.virtual_memory();
      for (std::size_t i = 0; i < h.pages.size(); ++i) {
        vmm->unmap(device_.index(), at(h.base, i * page_), page_);
        vmm->release(device_.index(), h.pages[i], page_);
      }
      vmm->free_address(device_.index(), h.base, h.reserved);
    }
  } catch (...) {
    // the device is gone, and its memory with it
    syncmem::detail::log_ignored("freeing a private pool's memory");
  }
}

void private_pool::report_to(segment_observer& observer) const noexcept {
  for (const auto& [p, bytes] : segments_) {
    if (bytes > 0) observer.graph_pool_added(pool_id_, p, bytes, is_heap(p));
  }
}

bool private_pool::is_heap(const void* base) const noexcept {
  return std::any_of(heaps_.begin(), heaps_.end(), [base](const auto& h) { return h.second.base == base; });
}

bool private_pool::reusable(const block& b, stream_handle s, std::uint64_t capture) {
  if (b.freed_in != capture || b.freed_on == s) return true;
  return b.freed_after && follows(s, *b.freed_after);
}

private_pool::block_map::iterator private_pool::find_fit(std::size_t size, bool small, stream_handle s,
                                                         std::uint64_t capture) {
  // The smallest reusable free block that fits (the lowest address among equals).
  auto best = blocks_.end();
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
    const block& b = it->second;
    if (!b.free || b.small != small || b.size < size) continue;
    if (best != blocks_.end() && b.size >= best->second.size) continue;
    if (reusable(b, s, capture)) best = it;
  }
  return best;
}

bool private_pool::coalesce() {
  bool merged = false;
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
    while (merge_next(it)) merged = true;
  }
  return merged;
}

bool private_pool::joins(const block& b, bool small, stream_handle s, std::uint64_t capture) {
  if (!b.free || b.small != small) return false;
  const std::uint64_t open = open_capture(b.freed_in);
  return (open == 0 || open == capture) && reusable(b, s, capture);
}

private_pool::block_map::iterator private_pool::merge_run(block_map::iterator first, block_map::iterator last,
                                                          stream_handle s, std::uint64_t capture) {
  block merged = first->second;
  for (auto it = std::next(first); it != std::next(last); ++it) merged.size += it->second.size;
  // Reusable by this capture on `s`, as each part was; by any capture once it ends.
  merged.freed_in = capture;
  merged.freed_on = s;
  merged.freed_after.reset();
  blocks_.erase(std::next(first), std::next(last));
  first->second = std::move(merged);
  return first;
}

private_pool::block_map::iterator private_pool::merge_for(std::size_t size, bool small, stream_handle s,
                                                          std::uint64_t capture) {
  if (capture == 0) return blocks_.end();
  for (auto first = blocks_.begin(); first != blocks_.end(); ++first) {
    if (!joins(first->second, small, s, capture)) continue;
    auto last = first;
    std::size_t total = first->second.size;
    while (total < size) {
      const auto next = std::next(last);
      if (next == blocks_.end() || !adjacent(*last, *next) || !joins(next->second, small, s, capture)) break;
      last = next;
      total += last->second.size;
    }
    if (total >= size) return merge_run(first, last, s, capture);
    first = last;  // a window starting inside this run ends where it does
  }
  return blocks_.end();
}

void* private_pool::allocate(std::size_t bytes, stream_handle s, std::uint64_t capture) {
  const std::size_t size = rounded(bytes);
  const bool small = size <= small_request;
  std::lock_guard lock{mutex_};
  auto best = find_fit(size, small, s, capture);
  // Free neighbours kept apart while a capture was open may merge now.
  if (best == blocks_.end() && coalesce()) best = find_fit(size, small, s, capture);
  if (best == blocks_.end()) best = merge_for(size, small, s, capture);
  if (best == blocks_.end()) best = grow(size, small, s, capture);
  if (best == blocks_.end()) {
    oom_info info;
    info.requested = bytes;
    info.device = device_;
    info.resource = name_;
    info.reserved = usage_->reserved.load();
    info.in_use = usage_->allocated.load();
    info.hint = fmt::format(
        "the allocation was made during a capture, from graph_pool {}; graphs that are no longer "
        "needed release their pools' memory when destroyed",
        pool_id_);
    SYNCMEM_OUT_OF_MEMORY(std::move(info));
  }
  return hand_out(best, size, bytes, s, capture);
}

private_pool::block_map::iterator private_pool::grow(std::size_t size, bool small, stream_handle s,
                                                     std::uint64_t capture) {
  if (small) {
    const auto it = new_segment(small_segment, true);
    return it != blocks_.end() ? it : new_segment(size, true);
  }
  if (heap* const h = upstream_ == nullptr ? heap_for(s) : nullptr) {
    // The block at the segment's end grows, if it is free and may serve this request.
    const std::size_t mapped = h->pages.size() * page_;
    auto last = blocks_.end();
    if (mapped > 0) {
      last = std::prev(blocks_.lower_bound(at(h->base, mapped)));
      if (!last->second.free || !reusable(last->second, s, capture)) last = blocks_.end();
    }
    // With the free blocks before it that this request may use.
    if (last != blocks_.end() && capture != 0 && joins(last->second, false, s, capture)) {
      auto first = last;
      while (first != blocks_.begin()) {
        const auto before = std::prev(first);
        if (!adjacent(*before, *first) || !joins(before->second, false, s, capture)) break;
        first = before;
      }
      if (first != last) last = merge_run(first, last, s, capture);
    }
    const std::size_t have = last != blocks_.end() ? last->second.size : 0;
    if (!grow_heap(*h, size - have)) return blocks_.end();  // the device has no room
    const std::size_t added = h->pages.size() * page_ - mapped;
    if (last != blocks_.end()) {
      last->second.size += added;
      return last;
    }
    block b;
    b.segment = h->base;
    b.size = added;
    return blocks_.emplace(at(h->base, mapped), std::move(b)).first;
  }
  return new_segment(round_up(size, segment_rounding), false);
}

private_pool::block_map::iterator private_pool::new_segment(std::size_t size, bool small) {
  if (!reserve(accounts_, size, true)) return blocks_.end();  // the resource's limit
  device_guard guard{device_};
  void* p = nullptr;
  if (upstream_ != nullptr) {
    try {
      p = upstream_->allocate(size, default_stream(device_));
    } catch (const syncmem::out_of_memory&) {
      p = nullptr;
    }
  } else {
    // The CUDA backend allocates in the relaxed capture mode: legal while this thread captures.
    p = syncmem::detail::backend_for(device_).allocate(device_.index(), size);
  }
  if (p == nullptr) {
    unreserve(accounts_, size, true);
    return blocks_.end();
  }
  block b;
  b.segment = p;
  b.size = size;
  b.small = small;
  try {
    segments_.emplace(p, size);
    const auto it = blocks_.emplace(p, std::move(b)).first;
    usage_->reserved.fetch_add(size);
    observers_->added(pool_id_, p, size, false);
    return it;
  } catch (...) {
    segments_.erase(p);
    if (upstream_ != nullptr) {
      upstream_->deallocate(p, size, default_stream(device_));
    } else {
      syncmem::detail::backend_for(device_).deallocate(device_.index(), p, size);
    }
    unreserve(accounts_, size, true);
    throw;
  }
}

private_pool::heap* private_pool::heap_for(stream_handle s) {
  if (const auto it = heaps_.find(s); it != heaps_.end()) return &it->second;
  auto& backend = syncmem::detail::backend_for(device_);
  syncmem::detail::vmm_capability* const vmm = backend.virtual_memory();
  device_guard guard{device_};
  backend.make_current(device_.index());  // the driver's virtual memory calls need the context current on this thread
  if (!vmm_tried_) {
    vmm_tried_ = true;
    page_ = vmm == nullptr ? 0 : vmm->granularity(device_.index());
  }
  if (page_ == 0) return nullptr;
  heap h;
  // The device's memory: a pool never holds more.
  h.reserved = round_up(backend.memory(device_.index()).total, page_);
  try {
    h.base = vmm->reserve(device_.index(), h.reserved);
  } catch (...) {
    syncmem::detail::log_ignored("reserving a graph pool's growable segment");  // segments of their own instead
    return nullptr;
  }
  try {
    segments_.emplace(h.base, 0);
    return &heaps_.emplace(s, std::move(h)).first->second;
  } catch (...) {
    segments_.erase(h.base);
    vmm->free_address(device_.index(), h.base, h.reserved);
    throw;
  }
}

bool private_pool::grow_heap(heap& h, std::size_t bytes) {
  auto& backend = syncmem::detail::backend_for(device_);
  syncmem::detail::vmm_capability* const vmm = backend.virtual_memory();
  device_guard guard{device_};
  backend.make_current(device_.index());
  const std::size_t mapped = h.pages.size() * page_;
  const std::size_t count = round_up(bytes, page_) / page_;
  if (mapped + count * page_ > h.reserved) return false;
  // The range counts as one segment from its first page on.
  if (!reserve(accounts_, count * page_, mapped == 0)) return false;  // the resource's limit
  std::vector<syncmem::detail::physical_handle> pages;
  const auto give_back = [&] {
    for (const auto p : pages) vmm->release(device_.index(), p, page_);
    unreserve(accounts_, count * page_, mapped == 0);
  };
  try {
    pages.reserve(count);
    while (pages.size() < count) {
      const auto p = vmm->create(device_.index(), page_);
      if (p == 0) {
        give_back();
        return false;
      }
      pages.push_back(p);
    }
    h.pages.reserve(h.pages.size() + count);
    vmm->map_pages(device_.index(), at(h.base, mapped), page_, pages.data(), count);
  } catch (...) {
    give_back();
    throw;
  }
  h.pages.insert(h.pages.end(), pages.begin(), pages.end());
  segments_.at(h.base) += count * page_;
  usage_->reserved.fetch_add(count * page_);
  observers_->added(pool_id_, at(h.base, mapped), count * page_, true);
  return true;
}

void* private_pool::hand_out(block_map::iterator it, std::size_t size, std::size_t bytes, stream_handle s,
                             std::uint64_t capture) {
  if (it->second.size >= size + block_rounding) (void)split_at(it, at(it->first, size));
  block& b = it->second;
  b.free = false;
  b.freed_after.reset();
  b.used_by.clear();
  b.allocated_in = capture;
  b.requested = bytes;
  b.stream = s;
  usage_->allocated.fetch_add(b.size);
  if (const auto a = accounts_.lock()) a->handed_out(b.size, bytes);
  return it->first;
}

private_pool::block_map::iterator private_pool::split_at(block_map::iterator it, void* where) {
  const auto offset = static_cast<std::size_t>(static_cast<std::byte*>(where) - static_cast<std::byte*>(it->first));
  if (offset == 0) return it;
  block rest = it->second;  // the same segment, and the same conditions of reuse
  rest.size = it->second.size - offset;
  const auto next = blocks_.emplace_hint(std::next(it), where, std::move(rest));
  it->second.size = offset;
  return next;
}

bool private_pool::combine(block& into, const block& other) {
  const std::uint64_t mine = open_capture(into.freed_in);
  const std::uint64_t theirs = open_capture(other.freed_in);
  if (mine == 0 && theirs == 0) {
    into.freed_in = 0;
    into.freed_on = stream_handle{};
    into.freed_after.reset();
    return true;
  }
  // One half free for every capture, the other for the open capture on a
  // stream: merged, free for that capture where the second half was (for
  // every capture again once it ends), as PyTorch merges a private pool's
  // free neighbours. Kept apart, best fit splits the halves where one block
  // would do, and the pool grows for what the merged block would hold.
  if (mine == 0 || theirs == 0) {
    const block& open = mine != 0 ? into : other;
    // A half the open capture may not reuse at all would take the other half from it.
    if (open.freed_on == stream_handle{} && !open.freed_after) return false;
    if (mine == 0) {
      into.freed_in = other.freed_in;
      into.freed_on = other.freed_on;
      into.freed_after = other.freed_after;
    }
    return true;
  }
  // Freed in two captures open now: apart.
  if (mine != theirs) return false;
  // Freed in the capture open now: reusable in it where both halves are.
  const bool both_after = into.freed_after && other.freed_after;
  if (into.freed_on != other.freed_on) {
    if (!both_after) return false;
    into.freed_on = stream_handle{};
  }
  if (both_after) {
    auto& nodes = *into.freed_after;
    nodes.insert(nodes.end(), other.freed_after->begin(), other.freed_after->end());
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  } else {
    into.freed_after.reset();
  }
  return true;
}

bool private_pool::merge_next(block_map::iterator it) {
  const auto next = std::next(it);
  if (next == blocks_.end() || !it->second.free || !next->second.free) return false;
  if (!adjacent(*it, *next)) return false;
  block merged = it->second;
  if (!combine(merged, next->second)) return false;
  merged.size += next->second.size;
  it->second = std::move(merged);
  blocks_.erase(next);
  return true;
}

void private_pool::merge(block_map::iterator it) {
  (void)merge_next(it);
  if (it != blocks_.begin()) (void)merge_next(std::prev(it));
}

void private_pool::deallocate(void* p, stream_handle s, std::uint64_t capture) noexcept {
  std::lock_guard lock{mutex_};
  const auto it = blocks_.find(p);
  if (it == blocks_.end() || it->second.free) return;
  it->second.free = true;
  // Reusable at once by the capture that allocated it only where that capture
  // freed it, on the stream that will allocate; by any later capture always.
  block& b = it->second;
  b.freed_in = b.allocated_in;
  const bool same_capture = capture != 0 && capture == b.allocated_in;
  b.freed_on = same_capture && b.used_by.empty() ? s : stream_handle{};
  b.freed_after.reset();
  if (same_capture) {
    try {
      b.freed_after = reached_by(s, b.used_by);
    } catch (...) {
      syncmem::detail::log_ignored("reading a capture's graph");  // not reused in this capture
    }
  }
  b.used_by.clear();
  usage_->allocated.fetch_sub(b.size);
  if (const auto a = accounts_.lock()) a->taken_back(b.size, b.requested);
  try {
    merge(it);
  } catch (...) {
    syncmem::detail::log_ignored("merging a freed block of a graph pool");  // it stays apart
  }
}
void private_pool::used_on(void* p, stream_handle s) {
  std::lock_guard lock{mutex_};
  const auto it = blocks_.find(p);
  if (it == blocks_.end() || it->second.free || it->second.stream == s) return;
  auto& users = it->second.used_by;
  if (std::find(users.begin(), users.end(), s) == users.end()) users.push_back(s);
}

std::optional<std::vector<syncmem::detail::capture_node>> private_pool::reached_by(
    stream_handle freeing, const std::vector<stream_handle>& users) {
  syncmem::detail::graph_capability* const graphs = syncmem::detail::backend_for(device_).graphs();
  if (graphs == nullptr) return std::nullopt;
  auto nodes = graphs->capture_frontier(device_.index(), freeing);
  for (const stream_handle user : users) {
    if (!nodes) return std::nullopt;
    // A stream outside the capture orders nothing in its graph.
    const auto more = graphs->capture_frontier(device_.index(), user);
    if (!more) return std::nullopt;
    nodes->insert(nodes->end(), more->begin(), more->end());
  }
  return nodes;
}

bool private_pool::follows(stream_handle s, const std::vector<syncmem::detail::capture_node>& nodes) {
  if (nodes.empty()) return true;
  syncmem::detail::graph_capability* const graphs = syncmem::detail::backend_for(device_).graphs();
  try {
    return graphs != nullptr && graphs->capture_follows(device_.index(), s, nodes);
  } catch (...) {
    syncmem::detail::log_ignored("reading a capture's graph");
    return false;
  }
}

std::optional<live_allocation> private_pool::info(const void* p) {
  std::lock_guard lock{mutex_};
  const auto it = blocks_.find(const_cast<void*>(p));  // NOLINT(cppcoreguidelines-pro-type-const-cast): a key only
  if (it == blocks_.end() || it->second.free) return std::nullopt;
  return live_allocation{it->second.requested, it->second.size,
                         syncmem::detail::stream_access::make(device_, it->second.stream), segment_pool::graph};
}

graph_pool_checkpoint private_pool::checkpoint() {
  graph_pool_checkpoint c;
  c.pool_id = pool_id_;
  std::lock_guard lock{mutex_};
  for (const auto& [p, bytes] : segments_) {
    if (bytes > 0) c.segments.emplace_back(p, bytes);
  }
  for (const auto& [s, h] : heaps_) {
    if (!h.pages.empty()) c.growable.emplace_back(h.base, syncmem::detail::stream_access::make(device_, s));
  }
  for (const auto& [p, b] : blocks_) {
    if (!b.free) {
      c.live.push_back({p, live_allocation{b.requested, b.size, syncmem::detail::stream_access::make(device_, b.stream),
                                           segment_pool::graph}});
    }
  }
  return c;
}

graph_pool_restored private_pool::restore(const graph_pool_checkpoint& c) {
  std::lock_guard lock{mutex_};
  // Each of the checkpoint's blocks lies in a segment here, apart from the others.
  std::vector<graph_pool_block> wanted = c.live;
  std::sort(wanted.begin(), wanted.end(), [](const auto& x, const auto& y) { return x.ptr < y.ptr; });
  const void* end_of_last = nullptr;
  for (const graph_pool_block& x : wanted) {
    const auto seg = segments_.upper_bound(x.ptr);
    const bool inside = seg != segments_.begin() && x.allocation.block_bytes > 0 &&
                        at(x.ptr, x.allocation.block_bytes) <= at(std::prev(seg)->first, std::prev(seg)->second);
    SYNCMEM_EXPECTS(inside && x.ptr >= end_of_last,
                    fmt::format("{}: restore: the checkpoint's block at {} ({} bytes) is not a block of graph_pool {} "
                                "here any more",
                                name_, x.ptr, x.allocation.block_bytes, pool_id_));
    end_of_last = at(x.ptr, x.allocation.block_bytes);
  }
  graph_pool_restored r;
  const auto accounts = accounts_.lock();
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
    block& b = it->second;
    if (b.free) continue;
    r.freed.push_back(
        {it->first, live_allocation{b.requested, b.size, syncmem::detail::stream_access::make(device_, b.stream),
                                    segment_pool::graph}});
    // Freed outside any capture: any later capture may reuse it.
    b.free = true;
    b.freed_in = 0;
    b.freed_on = stream_handle{};
    b.freed_after.reset();
    b.used_by.clear();
    usage_->allocated.fetch_sub(b.size);
    if (accounts) accounts->taken_back(b.size, b.requested);
  }
  for (const graph_pool_block& x : wanted) {
    carve(x);
    r.allocated.push_back({x.ptr, live_allocation{x.allocation.requested_bytes, x.allocation.block_bytes,
                                                  x.allocation.stream, segment_pool::graph}});
  }
  // What lies between the carved blocks is free, in as few blocks as their conditions allow.
  (void)coalesce();
  return r;
}

void private_pool::carve(const graph_pool_block& x) {
  void* const end = at(x.ptr, x.allocation.block_bytes);
  auto first = split_at(std::prev(blocks_.upper_bound(x.ptr)), x.ptr);
  const auto last = std::prev(blocks_.lower_bound(end));
  if (at(last->first, last->second.size) > end) (void)split_at(last, end);
  // Every block from x.ptr to end is free (restore freed them all): one block now.
  block& b = first->second;
  b.size = x.allocation.block_bytes;
  blocks_.erase(std::next(first), blocks_.lower_bound(end));
  b.free = false;
  b.freed_in = 0;
  b.freed_on = stream_handle{};
  b.freed_after.reset();
  b.used_by.clear();
  b.allocated_in = 0;
  b.requested = x.allocation.requested_bytes;
  b.stream = x.allocation.stream.handle();
  usage_->allocated.fetch_add(b.size);
  if (const auto a = accounts_.lock()) a->handed_out(b.size, b.requested);
}

}  // namespace syncmem::mr::detail::caching
