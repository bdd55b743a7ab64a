#include "mr/caching/stream_pools.hpp"
#include "core/ignored_failure.hpp"

#include <algorithm>
#include <limits>

namespace syncmem::mr::detail::caching {

namespace {
constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
// An oversize block serves requests up to this much smaller than itself.
constexpr std::size_t oversize_slack = std::size_t{20} << 20;
}  // namespace

stream_pools::stream_pools(std::size_t max_split_size) : max_split_size_{max_split_size} {
  idle_.kind = stream_pool::role::idle;
}

stream_pool& stream_pools::find_or_make_pool(stream_handle s) {
  auto it = live_.find(s);
  if (it == live_.end()) {
    auto fresh = std::make_unique<stream_pool>();
    fresh->stream = s;
    it = live_.emplace(s, std::move(fresh)).first;
  }
  last_ = it->second.get();
  return *last_;
}

block* stream_pools::take_free(stream_pool& pool, pool_kind kind, std::size_t key) {
  auto& index = pool.index(kind);
  if (index.empty()) return nullptr;
  std::size_t max_size = none;
  if (kind == pool_kind::large && max_split_size_ != none && oversize_whole_) {
    // Oversize blocks (over max_split) serve only requests near their size.
    max_size =
        key < max_split_size_ ? max_split_size_ - 1 : (key > none - oversize_slack ? none : key + oversize_slack);
  }
  block* b = index.find(key, max_size);
  if (b == nullptr) return nullptr;
  index.remove(b);
  split(b, key, pool, kind);
  return b;
}

block* stream_pools::take_whole(block* b, std::size_t key, stream_pool& pool) {
  pool.large.remove(b);
  split(b, key, pool, pool_kind::large);
  return b;
}

void stream_pools::split(block* b, std::size_t key, stream_pool& pool, pool_kind kind) {
  const std::size_t rest = b->size - key;
  if (rest < granule) return;
  if (kind == pool_kind::large && !b->seg->growable && b->size > max_split_size_) return;
  block* r = nullptr;
  try {
    r = blocks_.make();
  } catch (...) {
    // no record for the rest: hand out the whole block
    syncmem::detail::log_ignored("making a block record for the rest of a split");
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

block* stream_pools::absorb(block* into, block* gone) noexcept {
  into->size += gone->size;
  unlink_from_segment(gone);
  blocks_.release(gone);
  ++merges_;
  return into;
}

block* stream_pools::free_block(block* b, stream_pool& pool) noexcept {
  b->status = block_status::free;
  b->owner = &pool;
  auto mergeable = [&pool](const block* n) {
    return n != nullptr && n->status == block_status::free && n->owner == &pool;
  };
  auto& index = pool.index(b->seg->kind);
  if (mergeable(b->prev)) {
    index.remove(b->prev);
    b = absorb(b->prev, b);
  }
  if (mergeable(b->next)) {
    index.remove(b->next);
    b = absorb(b, b->next);
  }
  index.insert(b);
  return b;
}

stream_pool* stream_pools::retire(stream_handle s) {
  auto it = live_.find(s);
  if (it == live_.end()) return nullptr;
  retired_.reserve(retired_.size() + 1);  // nothing lost if this throws
  std::unique_ptr<stream_pool> pool = std::move(it->second);
  live_.erase(it);
  if (last_ == pool.get()) last_ = nullptr;
  pool->kind = stream_pool::role::retired;
  retired_.push_back(std::move(pool));
  return retired_.back().get();
}

bool stream_pools::merge_into_idle(stream_pool& retired) noexcept {
  try {
    for (pool_kind kind : {pool_kind::small, pool_kind::large}) {
      const auto blocks = retired.index(kind).all();
      for (block* b : blocks) retired.index(kind).remove(b);
      // In turn: a block merges only with neighbours already moved.
      for (block* b : blocks) free_block(b, idle_);
    }
  } catch (...) {
    // out of host memory: the blocks stay with the retired pool for now
    syncmem::detail::log_ignored("moving a retired stream's blocks to the idle pool");
    return false;
  }
  return true;
}

template <class F>
void stream_pools::for_each_pool(F&& f) const {
  f(idle_);
  for (const auto& entry : live_) f(*entry.second);
  for (const auto& p : retired_) f(*p);
}

std::size_t stream_pools::free_bytes() const noexcept {
  std::size_t bytes = 0;
  for_each_pool([&bytes](const stream_pool& p) { bytes += p.small.bytes() + p.large.bytes(); });
  return bytes;
}

std::size_t stream_pools::largest_free() const noexcept {
  std::size_t best = 0;
  for_each_pool([&best](const stream_pool& p) { best = std::max({best, p.small.largest(), p.large.largest()}); });
  return best;
}

}  // namespace syncmem::mr::detail::caching
