#pragma once

// What a graph pool's memory counts toward: the statistics and the limit of
// the caching resource it serves, as PyTorch counts its private pools' memory
// in memory_stats() and under set_per_process_memory_fraction. The caching
// state implements it; a private pool calls it under its own lock, which is
// taken before the state's.

#include <cstddef>

namespace syncmem::mr::detail::caching {

class pool_accounts {
 public:
  virtual ~pool_accounts() = default;
  // Whether `bytes` more may be held from the device within the resource's
  // limit; counted as reserved if so. `segment`: they make a segment.
  [[nodiscard]] virtual bool reserve(std::size_t bytes, bool segment) noexcept = 0;
  // `bytes` reserved went back to the device; `segment`: a whole segment.
  virtual void unreserve(std::size_t bytes, bool segment) noexcept = 0;
  // A block of `size` bytes handed out for a request of `requested`, and back.
  virtual void handed_out(std::size_t size, std::size_t requested) noexcept = 0;
  virtual void taken_back(std::size_t size, std::size_t requested) noexcept = 0;

 protected:
  pool_accounts() = default;
  pool_accounts(const pool_accounts&) = default;
  pool_accounts& operator=(const pool_accounts&) = default;
};

}  // namespace syncmem::mr::detail::caching
