#pragma once

// The free memory of a caching allocator, by stream: each live stream's pool,
// the pools of destroyed streams (retired: they wait for an event recorded
// before the destruction), and the idle pool (memory that no stream's work
// can still be using). Splits blocks to fit a request and merges a freed
// block with its free neighbours of the same pool. Owns the block records.
// Not thread-safe: the allocator calls it under its lock.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "mr/caching/block.hpp"
#include "mr/caching/free_index.hpp"

namespace syncmem::mr::detail::caching {

struct stream_pool {
  enum class role : std::uint8_t { live, retired, idle };
  stream_handle stream{};
  role kind = role::live;
  event_handle retire_event{};
  free_index small;
  free_index large;

  free_index& index(pool_kind k) noexcept { return k == pool_kind::small ? small : large; }
  [[nodiscard]] const free_index& index(pool_kind k) const noexcept { return k == pool_kind::small ? small : large; }
};

class stream_pools {
 public:
  using live_map = std::unordered_map<stream_handle, std::unique_ptr<stream_pool>>;
  using retired_list = std::vector<std::unique_ptr<stream_pool>>;

  // Large blocks over max_split_size are kept whole (unless growable).
  explicit stream_pools(std::size_t max_split_size);

  // The pool of a live stream, made on first use. Inline for the common case,
  // the stream of the last call.
  [[nodiscard]] stream_pool& pool_for(stream_handle s) {
    if (last_ != nullptr && last_->stream == s) [[likely]]
      return *last_;
    return find_or_make_pool(s);
  }
  [[nodiscard]] stream_pool& idle() noexcept { return idle_; }
  [[nodiscard]] const live_map& live() const noexcept { return live_; }
  [[nodiscard]] const retired_list& retired() const noexcept { return retired_; }
  [[nodiscard]] block_store& blocks() noexcept { return blocks_; }

  // A free block of `pool` that fits `key`, split to it; nullptr when none.
  [[nodiscard]] block* take_free(stream_pool& pool, pool_kind kind, std::size_t key);
  // Takes a free large block out of its pool's index and splits it to `key`.
  block* take_whole(block* b, std::size_t key, stream_pool& pool);
  // Cuts `b` to `key` bytes when the rest is worth keeping: the rest joins `pool`.
  void split(block* b, std::size_t key, stream_pool& pool, pool_kind kind);
  // Makes `b` a free block of `pool`, merged with free neighbours of that pool.
  block* free_block(block* b, stream_pool& pool) noexcept;

  // Moves the pool of a destroyed stream to the retired list (nullptr: it had none).
  stream_pool* retire(stream_handle s);
  // Moves a retired pool's blocks into the idle pool; false when out of host memory.
  bool merge_into_idle(stream_pool& retired) noexcept;
  // Drops the retired pools for which done(pool) says true.
  template <class F>
  void drop_retired_if(F&& done) {
    std::erase_if(retired_, [&done](const std::unique_ptr<stream_pool>& p) { return done(*p); });
  }

  // Growable segments take any large block, since they cost no extra memory to split.
  void serve_oversize_freely() noexcept { oversize_whole_ = false; }

  [[nodiscard]] std::size_t free_bytes() const noexcept;
  [[nodiscard]] std::size_t largest_free() const noexcept;
  [[nodiscard]] std::uint64_t splits() const noexcept { return splits_; }
  [[nodiscard]] std::uint64_t merges() const noexcept { return merges_; }

 private:
  template <class F>
  void for_each_pool(F&& f) const;
  stream_pool& find_or_make_pool(stream_handle s);
  // `into` grows over its neighbour `gone`, whose record goes.
  block* absorb(block* into, block* gone) noexcept;

  const std::size_t max_split_size_;
  bool oversize_whole_ = true;
  block_store blocks_;
  live_map live_;
  stream_pool* last_ = nullptr;
  stream_pool idle_;
  retired_list retired_;
  std::uint64_t splits_ = 0;
  std::uint64_t merges_ = 0;
};

}  // namespace syncmem::mr::detail::caching
