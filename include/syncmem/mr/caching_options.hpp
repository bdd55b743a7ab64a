#pragma once

/// @file mr/caching_options.hpp
/// @brief How a caching_resource behaves, set by API or by the environment
/// variable SYNCMEM_ALLOC_CONF.

#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace syncmem::mr {

/// @brief The settings of a caching_resource.
///
/// As a string (SYNCMEM_ALLOC_CONF, parse(), to_string()), comma-separated
/// `key:value` pairs, each key at most once, spaces around tokens ignored:
///
/// | key               | value                          | field |
/// |-------------------|--------------------------------|-------|
/// | `max_split_mb`    | MiB (1..16777216) or unlimited | max_split_size |
/// | `expandable`      | 0, 1, false, true              | expandable |
/// | `limit_mb`        | MiB (1..1073741824) or unlimited | limit |
/// | `thread_cache_mb` | MiB (0..65536)                 | thread_cache_size |
/// | `release_before_grow` | 0, 1, false, true          | release_before_grow |
/// | `grow_from_idle`  | 0, 1, false, true              | grow_from_idle |
/// | `expandable_page_mb` | MiB (0..1024), 0: the device's granularity | expandable_page_size |
/// | `expandable_large_page_mb` | MiB (0..1024, default 20), 0: none | expandable_large_page_size |
/// | `compact`         | 0, 1, false, true (default 1)  | compact_under_pressure |
///
/// e.g. `SYNCMEM_ALLOC_CONF=max_split_mb:256,expandable:1,limit_mb:4096`.
struct caching_options {
  /// @brief Free blocks larger than this are never split, and a request
  /// smaller than it never takes one (an oversize request takes one at most
  /// 20 MiB larger). Keeps huge cached blocks whole for huge requests.
  /// Applies to ordinary segments; growable segments ignore it.
  std::size_t max_split_size = std::numeric_limits<std::size_t>::max();
  /// @brief Grow large-block memory by mapping pages into one reserved range
  /// (the CUDA virtual memory API) instead of allocating new segments; free
  /// pages can then be given back wherever they are. Falls back to ordinary
  /// segments where the device has no virtual memory management.
  bool expandable = false;
  /// @brief The most bytes the resource may reserve from the device; past it
  /// an allocation is refused as out of memory (after freeing the cache).
  std::optional<std::size_t> limit;
  /// @brief Bytes of freed blocks each thread may keep for its own reuse
  /// without taking the resource's lock (0 turns per-thread caches off).
  std::size_t thread_cache_size = std::size_t{256} << 20;
  /// @brief Before reserving more memory, give back cached memory that
  /// cannot serve the request when it is a large share of what is reserved
  /// (the work has moved on, e.g. to new shapes): wholly free segments when
  /// they are half of the reserve, or (growable range) idle pages, moved to
  /// where the range grows, when they are a quarter. Keeps the footprint near
  /// what is in use across such changes, at the cost of a device
  /// synchronisation then; steady churn, which always leaves some memory idle,
  /// does not trigger it. Off, cached memory is given back only when memory
  /// runs out or on empty_cache() / trim().
  bool release_before_grow = true;
  /// @brief Growable range only, with release_before_grow: every growth
  /// first takes whole idle pages from elsewhere in the range, as many as it
  /// needs and from the smallest free blocks first, before mapping new
  /// memory, whatever their share of the reserve.
  /// Keeps what is reserved within a few pages of what is in use at its
  /// peak, at the cost of a device synchronisation and remapping on those
  /// growths (see docs/allocator.md for what that costs). Off, idle pages
  /// move only when they are a quarter of the reserve.
  bool grow_from_idle = false;
  /// @brief Growable range only: the size of each physical page it maps,
  /// rounded up to a multiple of the device's granularity; 0 is the
  /// granularity itself (2 MiB on an H100). Each page is one driver
  /// allocation, mapped and given access on its own, at about the same cost
  /// whatever its size (50-60 µs on an H100), so larger pages make growing
  /// and moving memory that many times cheaper; idle memory is then given
  /// back or moved in whole pages only.
  std::size_t expandable_page_size = 0;
  /// @brief Growable range only: a growth of 256 MiB or more is mapped in
  /// physical allocations of this size (rounded up to a multiple of the page
  /// size) wherever a whole one fits aligned, and in pages at its ends, so
  /// large growths cost a fraction of the driver calls. A large page is
  /// unmapped or moved only when all of it is idle. 0 (or no larger than a
  /// page): pages only.
  std::size_t expandable_large_page_size = std::size_t{20} << 20;
  /// @brief Ordinary segments only: when an allocation finds no memory even
  /// after the cache is given back (the device is full, or the limit is
  /// reached), large blocks grow from then on in the growable range, with
  /// grow_from_idle, instead of the allocation failing. Free memory stuck in
  /// pieces of ordinary segments returns to the device as those segments
  /// empty. Costs nothing while memory is plentiful; after the switch,
  /// growths cost what the growable range's do (docs/allocator.md).
  bool compact_under_pressure = true;

  /// @brief Parses `text` (see the class comment). `source` names where the
  /// text came from in error messages.
  /// @throws syncmem::logic_error naming the bad key or value and what is valid
  [[nodiscard]] static caching_options parse(std::string_view text, std::string_view source = "caching_options");
  /// @brief These options with the keys that `text` names set from it (the
  /// others kept), as parse() reads them.
  /// @throws syncmem::logic_error naming the bad key or value and what is valid
  [[nodiscard]] caching_options with(std::string_view text, std::string_view source = "caching_options") const;
  /// @brief The options of SYNCMEM_ALLOC_CONF; the defaults when it is unset or empty.
  /// @throws syncmem::logic_error when it is malformed (names the variable, the key or value)
  [[nodiscard]] static caching_options from_environment();
  /// @brief `base` with the keys SYNCMEM_ALLOC_CONF names set from it; `base`
  /// when it is unset or empty.
  /// @throws syncmem::logic_error when it is malformed
  [[nodiscard]] static caching_options from_environment(const caching_options& base);
  /// @brief The raw SYNCMEM_ALLOC_CONF, or nullopt when unset.
  [[nodiscard]] static std::optional<std::string> environment_text();

  /// @brief Every key with its value, in a form parse() reads back:
  /// "max_split_mb:unlimited,expandable:0,limit_mb:unlimited,thread_cache_mb:256,release_before_grow:1,grow_from_idle:0,expandable_page_mb:0,expandable_large_page_mb:20,compact:1".
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const caching_options&, const caching_options&) = default;
};

}  // namespace syncmem::mr
