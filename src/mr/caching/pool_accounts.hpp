#pragma once

// What a graph pool's memory counts toward: the statistics and the limit of
// the caching resource it serves, as PyTorch counts its private pools' memory
// in memory_stats() and under set_per_process_memory_fraction. So does an
// mr::pool's made with pool_options::counts_in (a MemPool's). The caching
// state implements it; a private pool, or a pool's own caching state, calls
// it under its own lock, which is taken before this state's.

#include <cstddef>

namespace syncmem::mr::detail::caching {

class pool_accounts {
 public:
  virtual ~pool_accounts() = default;
  // Whether `bytes` more may be held from the device within the resource's
  // limit; counted as reserved if so. `segment`: they make a segment.
  [[nodiscard]] virtual bool reserve(std::size_t bytes, bool segment) noexcept = 0;
  // Whether `bytes` more stay within the limit, without counting them
  // (another resource's growth, counted by add_reserved once made).
  [[nodiscard]] virtual bool admits(std::size_t bytes) noexcept = 0;
  // Another resource's growth of `bytes`, which admits allowed, and its
  // giving `bytes` back (its own statistics count how often it did).
  virtual void add_reserved(std::size_t bytes) noexcept = 0;
  virtual void remove_reserved(std::size_t bytes) noexcept = 0;
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
