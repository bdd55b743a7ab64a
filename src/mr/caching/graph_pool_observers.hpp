#pragma once

// The segment observers of one caching resource as its graph pools tell them
// of their memory (segment_observer::graph_pool_added, _releasing). Shared by
// the resource's private pools, which call it under their own locks and may
// outlive the resource; so, unlike segment_observers, it locks itself (after
// a pool's lock, never before one).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "syncmem/mr/segment_observer.hpp"

namespace syncmem::mr::detail::caching {

class graph_pool_observers {
 public:
  void add(std::shared_ptr<segment_observer> observer);
  // Whether `observer` was there.
  bool remove(const segment_observer* observer) noexcept;
  // The resource goes: nobody is told anything more.
  void clear() noexcept;
  void added(std::uint64_t pool, void* at, std::size_t bytes, bool mapped) const noexcept;
  void releasing(std::uint64_t pool, void* at, std::size_t bytes, bool mapped) const noexcept;

 private:
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<segment_observer>> observers_;
};

}  // namespace syncmem::mr::detail::caching
