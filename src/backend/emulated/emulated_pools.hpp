#pragma once

#include <cstddef>

#include "backend/pool_capability.hpp"

namespace syncmem::detail::emulated {

class emulated_backend;
struct memory_pool;

// Stream-ordered pools on emulated devices (the emulated cudaMemPoolCreate).
class emulated_pools final : public pool_capability {
 public:
  explicit emulated_pools(emulated_backend& backend) noexcept : backend_{backend} {}

  [[nodiscard]] bool supported(int index) override;
  [[nodiscard]] pool_handle create(int index, std::size_t release_threshold, std::size_t max_size) override;
  void destroy(int index, pool_handle pool) noexcept override;
  [[nodiscard]] void* allocate(int index, pool_handle pool, std::size_t bytes, stream_handle s) override;
  void deallocate(int index, pool_handle pool, void* p, stream_handle s) noexcept override;
  void trim(int index, pool_handle pool, std::size_t keep_bytes) override;
  [[nodiscard]] memory_pool_usage usage(int index, pool_handle pool) override;
  void reset_peaks(int index, pool_handle pool) override;

 private:
  // A block of at least `size` bytes for `stream` from the pool: one freed
  // earlier on that stream, a cached one, or a new one (after releasing the
  // cache if the device is full or the pool at its max_size); its size goes
  // to `block`. Null when the device or the pool's max_size has no room.
  // Under the pool's mutex.
  void* take_pool_block(memory_pool& pool, const void* stream, std::size_t size, std::size_t& block);
  // Frees cached blocks of a pool, largest first, until it caches at most
  // `keep` bytes. Under the pool's mutex.
  void release_cached(memory_pool& pool, std::size_t keep) noexcept;

  emulated_backend& backend_;
};

}  // namespace syncmem::detail::emulated
