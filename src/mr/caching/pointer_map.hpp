#pragma once

// Live blocks by address: open addressing with linear probing and
// backward-shift deletion (no tombstones), so that the slow path finds,
// adds and removes a block without allocating a node each time.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mr/caching/block.hpp"

namespace syncmem::mr::detail::caching {

class pointer_map {
 public:
  // May allocate (grow the table); the map is unchanged if that throws.
  void insert(std::uintptr_t ptr, block* b) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    std::size_t i = home(ptr);
    while (slots_[i].ptr != 0 && slots_[i].ptr != ptr) i = (i + 1) & mask_;
    if (slots_[i].ptr == 0) ++size_;
    slots_[i] = {ptr, b};
  }

  [[nodiscard]] block* find(std::uintptr_t ptr) const noexcept {
    if (slots_.empty()) return nullptr;
    for (std::size_t i = home(ptr);; i = (i + 1) & mask_) {
      if (slots_[i].ptr == ptr) return slots_[i].b;
      if (slots_[i].ptr == 0) return nullptr;
    }
  }

  // Removes `ptr` and returns its block; nullptr when absent.
  block* erase(std::uintptr_t ptr) noexcept {
    if (slots_.empty()) return nullptr;
    std::size_t i = home(ptr);
    while (slots_[i].ptr != ptr) {
      if (slots_[i].ptr == 0) return nullptr;
      i = (i + 1) & mask_;
    }
    block* const found = slots_[i].b;
    --size_;
    for (std::size_t j = (i + 1) & mask_; slots_[j].ptr != 0; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].ptr);
      // Move j back into the hole at i unless its home lies cyclically in (i, j].
      const bool stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
      if (!stays) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = entry{};
    return found;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  template <class F>
  void for_each(F&& f) const {
    for (const entry& e : slots_) {
      if (e.ptr != 0) f(e.ptr, e.b);
    }
  }

 private:
  struct entry {
    std::uintptr_t ptr = 0;  // 0: unused
    block* b = nullptr;
  };

  [[nodiscard]] std::size_t home(std::uintptr_t ptr) const noexcept {
    const std::uint64_t h = (static_cast<std::uint64_t>(ptr) / granule) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h ^ (h >> 29)) & mask_;
  }

  void grow() {
    std::vector<entry> bigger(slots_.empty() ? 256 : slots_.size() * 2);
    bigger.swap(slots_);
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const entry& e : bigger) {
      if (e.ptr == 0) continue;
      std::size_t i = home(e.ptr);
      while (slots_[i].ptr != 0) i = (i + 1) & mask_;
      slots_[i] = e;
      ++size_;
    }
  }

  std::vector<entry> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace syncmem::mr::detail::caching
