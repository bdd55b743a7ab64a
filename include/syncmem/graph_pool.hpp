#pragma once

/// @file graph_pool.hpp
/// @brief The memory that device allocations made during stream capture come
/// from (PyTorch's graph pools): a caching_resource asked for memory on a
/// stream that syncmem::begin_capture is capturing serves it from the private
/// pool of that capture, never from its ordinary cache. What the pool reserves
/// stays reserved while a graph captured into it, or a graph_pool handle of
/// it, exists; then it goes back to the device. How the pool reuses memory is
/// in docs/graphs.md.
///
/// @code
/// syncmem::graph_pool pool;                       // shared by two graphs
/// syncmem::begin_capture(s, pool);
/// /* ...allocate, use, free on s... */
/// syncmem::graph first = syncmem::end_capture(s);
/// syncmem::begin_capture(s, pool);                // may reuse what `first` freed
/// syncmem::graph second = syncmem::end_capture(s);
/// // replay them in the order they were captured, never concurrently
/// @endcode

#include <cstddef>
#include <cstdint>
#include <memory>

namespace syncmem {

namespace detail {
struct graph_pool_state;
struct graph_pool_access;
}  // namespace detail

/// @brief A handle of a private pool for captures. Copies share the pool;
/// the pool lives as long as a handle of it or a graph captured into it.
/// Graphs that share a pool must be launched in the order they were captured
/// and never concurrently: a block one of them freed may be used by a later one.
class graph_pool {
 public:
  /// @brief A new, empty pool.
  graph_pool();

  /// @brief Bytes of device memory the pool reserves now, over every resource
  /// that allocated from it.
  [[nodiscard]] std::size_t reserved_bytes() const noexcept;
  /// @brief Bytes of the pool's memory handed out and not freed.
  [[nodiscard]] std::size_t allocated_bytes() const noexcept;
  /// @brief A number that names the pool in messages, unique in the process.
  [[nodiscard]] std::uint64_t id() const noexcept;

  friend bool operator==(const graph_pool& a, const graph_pool& b) noexcept { return a.state_ == b.state_; }

 private:
  friend struct detail::graph_pool_access;
  explicit graph_pool(std::shared_ptr<detail::graph_pool_state> state) noexcept : state_{std::move(state)} {}
  std::shared_ptr<detail::graph_pool_state> state_;
};

}  // namespace syncmem
