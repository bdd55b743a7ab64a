#pragma once

// The segment observers of one caching allocator (mr/segment_observer.hpp),
// told by device_segments when a segment comes and before it goes, and by the
// growable range when it maps pages and before it unmaps them. Not
// thread-safe: the allocator calls it under its lock.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "syncmem/mr/segment_observer.hpp"

namespace syncmem::mr::detail::caching {

class segment_observers {
 public:
  void add(std::shared_ptr<segment_observer> observer);
  // Whether `observer` was there.
  bool remove(const segment_observer* observer) noexcept;
  void added(std::uintptr_t base, std::size_t bytes) const noexcept;
  void releasing(std::uintptr_t base, std::size_t bytes) const noexcept;
  void mapped(std::uintptr_t at, std::size_t bytes) const noexcept;
  void unmapping(std::uintptr_t at, std::size_t bytes) const noexcept;
  // Tells each observer that the resource goes, and forgets them.
  void destroyed() noexcept;

 private:
  std::vector<std::shared_ptr<segment_observer>> observers_;
};

}  // namespace syncmem::mr::detail::caching
