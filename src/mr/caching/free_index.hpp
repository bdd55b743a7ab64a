#pragma once

// The free blocks of one pool, indexed by size for constant-time good fit: a
// two-level segregated fit (TLSF). Sizes fall in classes: first by power of
// two, then into 32 equal steps; a bitmap per level says which classes hold
// blocks, so the smallest class that holds a large enough block is found
// with two bit scans. Within the request's own class (where blocks may be on
// either side of it) a few blocks are looked at for the best one. The fit is
// within 1/32 of the best fit; std::set best fit is what this replaces.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "mr/caching/block.hpp"

namespace syncmem::mr::detail::caching {

class free_index {
 public:
  static constexpr int sl_bits = 5;
  static constexpr int sl_count = 1 << sl_bits;
  static constexpr int fl_count = 48;  // sizes up to 2^56 bytes
  static constexpr int scan_in_class = 8;

  void insert(block* b) noexcept {
    const auto [fl, sl] = class_of(b->size);
    b->index_fl = static_cast<std::uint8_t>(fl);
    b->index_sl = static_cast<std::uint8_t>(sl);
    block*& head = heads_[fl][sl];
    b->link_prev = nullptr;
    b->link_next = head;
    if (head != nullptr) head->link_prev = b;
    head = b;
    fl_map_ |= std::uint64_t{1} << fl;
    sl_map_[fl] |= std::uint32_t{1} << sl;
    bytes_ += b->size;
    ++count_;
  }

  // `b` must be listed here, and its size unchanged since insert().
  void remove(block* b) noexcept {
    const int fl = b->index_fl;  // the class it was listed under
    const int sl = b->index_sl;
    if (b->link_prev != nullptr) {
      b->link_prev->link_next = b->link_next;
    } else {
      heads_[fl][sl] = b->link_next;
    }
    if (b->link_next != nullptr) b->link_next->link_prev = b->link_prev;
    if (heads_[fl][sl] == nullptr) {
      sl_map_[fl] &= ~(std::uint32_t{1} << sl);
      if (sl_map_[fl] == 0) fl_map_ &= ~(std::uint64_t{1} << fl);
    }
    b->link_prev = b->link_next = nullptr;
    bytes_ -= b->size;
    --count_;
  }

  // A block of at least `size` and at most `max_size` bytes, close to the
  // smallest such; nullptr when there is none (or none found in the request's
  // class and the next class up holds only blocks over max_size).
  [[nodiscard]] block* find(std::size_t size, std::size_t max_size) const noexcept {
    if (count_ == 0) return nullptr;
    auto [fl, sl] = class_of(size);
    block* best = nullptr;
    int looked = 0;
    for (block* b = heads_[fl][sl]; b != nullptr && looked < scan_in_class; b = b->link_next, ++looked) {
      if (b->size >= size && b->size <= max_size && (best == nullptr || b->size < best->size)) {
        best = b;
        if (b->size == size) break;
      }
    }
    if (best != nullptr) return best;
    // Every block of a higher class is large enough.
    std::uint32_t sl_above = sl + 1 < sl_count ? sl_map_[fl] & (~std::uint32_t{0} << (sl + 1)) : 0;
    if (sl_above == 0) {
      const std::uint64_t fl_above = fl + 1 < 64 ? fl_map_ & (~std::uint64_t{0} << (fl + 1)) : 0;
      if (fl_above == 0) return nullptr;
      fl = std::countr_zero(fl_above);
      sl_above = sl_map_[fl];
    }
    sl = std::countr_zero(sl_above);
    looked = 0;
    for (block* b = heads_[fl][sl]; b != nullptr && looked < scan_in_class; b = b->link_next, ++looked) {
      if (b->size <= max_size && (best == nullptr || b->size < best->size)) best = b;
    }
    return best;
  }

  // The largest free block (for reports; scans the top class).
  [[nodiscard]] std::size_t largest() const noexcept {
    if (fl_map_ == 0) return 0;
    const int fl = 63 - std::countl_zero(fl_map_);
    const int sl = 31 - std::countl_zero(sl_map_[fl]);
    std::size_t best = 0;
    for (block* b = heads_[fl][sl]; b != nullptr; b = b->link_next) best = b->size > best ? b->size : best;
    return best;
  }

  template <class F>
  void for_each(F&& f) const {
    for (int fl = 0; fl < fl_count; ++fl) {
      if ((fl_map_ & (std::uint64_t{1} << fl)) == 0) continue;
      for (int sl = 0; sl < sl_count; ++sl) {
        for (block* b = heads_[fl][sl]; b != nullptr; b = b->link_next) f(b);
      }
    }
  }

  [[nodiscard]] std::vector<block*> all() const {
    std::vector<block*> out;
    out.reserve(count_);
    for_each([&out](block* b) { out.push_back(b); });
    return out;
  }

  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::size_t count() const noexcept { return count_; }

  static std::pair<int, int> class_of(std::size_t size) noexcept {
    const std::size_t units = size / granule;
    if (units < static_cast<std::size_t>(sl_count)) return {0, static_cast<int>(units)};
    const int top = 63 - std::countl_zero(static_cast<std::uint64_t>(units));
    return {top - sl_bits + 1, static_cast<int>((units >> (top - sl_bits)) - sl_count)};
  }

 private:
  std::array<std::array<block*, sl_count>, fl_count> heads_{};
  std::array<std::uint32_t, fl_count> sl_map_{};
  std::uint64_t fl_map_ = 0;
  std::size_t bytes_ = 0;
  std::size_t count_ = 0;
};

}  // namespace syncmem::mr::detail::caching
