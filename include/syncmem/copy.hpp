#pragma once

/// @file copy.hpp
/// @brief Copies between any two kinds of memory, ordered on a stream.
/// (Interim: every copy is one backend memcpy; the transfer engine replaces it.)

#include <cstddef>
#include <memory>

#include "syncmem/stream.hpp"

namespace syncmem {

/// @brief A copy in flight. Move-only; a default-constructed one is complete.
class transfer {
 public:
  transfer() noexcept;
  ~transfer();
  transfer(transfer&&) noexcept;
  transfer& operator=(transfer&&) noexcept;
  transfer(const transfer&) = delete;
  transfer& operator=(const transfer&) = delete;

  /// @brief Whether the destination is complete.
  [[nodiscard]] bool ready() const;
  /// @brief Blocks until the destination is complete.
  void wait() const;

  struct state;

 private:
  friend transfer copy_async(void*, const void*, std::size_t, stream_view);
  std::unique_ptr<state> state_;
};

/// @brief Copies `bytes` bytes from `src` to `dst` in order on `stream`.
[[nodiscard]] transfer copy_async(void* dst, const void* src, std::size_t bytes, stream_view stream);
/// @brief copy_async(...).wait().
void copy(void* dst, const void* src, std::size_t bytes, stream_view stream);

}  // namespace syncmem
