#pragma once

// What a caching allocator holds from the device: bytes reserved, their peak,
// the limit on them, and how often it grew and shrank. Shared by the ordinary
// segments and the growable range. Not thread-safe (the allocator's lock),
// except the limit, which set_limit may change from any thread. A pool's
// reservation also counts in the resource it counts in (pool_options::counts_in):
// its growths must stay within that one's limit too.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

#include "mr/caching/pool_accounts.hpp"

namespace syncmem::mr::detail::caching {

class reservation {
 public:
  static constexpr std::size_t no_limit = std::numeric_limits<std::size_t>::max();

  explicit reservation(std::optional<std::size_t> limit) : limit_{limit.value_or(no_limit)} {}

  void set_limit(std::optional<std::size_t> limit) noexcept {
    limit_.store(limit.value_or(no_limit), std::memory_order_relaxed);
  }
  [[nodiscard]] std::optional<std::size_t> limit() const noexcept {
    const std::size_t limit = limit_.load(std::memory_order_relaxed);
    return limit == no_limit ? std::nullopt : std::optional{limit};
  }

  // Whether `more` bytes stay within the limit; remembers a refusal for the
  // out-of-memory report, until forget_limit_hit.
  // Set once, before the first growth; `accounts` outlives this.
  void count_in(pool_accounts* accounts) noexcept { counts_in_ = accounts; }

  [[nodiscard]] bool admits(std::size_t more) noexcept {
    const std::size_t limit = limit_.load(std::memory_order_relaxed);
    const bool own = limit == no_limit || (more <= limit && reserved_ <= limit - more);
    const bool ok = own && (counts_in_ == nullptr || counts_in_->admits(more));
    limit_hit_ = limit_hit_ || !own;
    counted_in_refused_ = counted_in_refused_ || (own && !ok);
    return ok;
  }
  [[nodiscard]] bool limit_hit() const noexcept { return limit_hit_; }
  // Whether the resource this one counts in refused a growth (its limit).
  [[nodiscard]] bool counted_in_refused() const noexcept { return counted_in_refused_; }
  void forget_limit_hit() noexcept { limit_hit_ = counted_in_refused_ = false; }

  void add(std::size_t bytes) noexcept {
    reserved_ += bytes;
    peak_ = std::max(peak_, reserved_);
    if (counts_in_ != nullptr) counts_in_->add_reserved(bytes);
  }
  void remove(std::size_t bytes) noexcept {
    reserved_ -= bytes;
    if (counts_in_ != nullptr) counts_in_->remove_reserved(bytes);
  }
  [[nodiscard]] std::size_t bytes() const noexcept { return reserved_; }
  [[nodiscard]] std::size_t peak() const noexcept { return peak_; }
  void reset_peak() noexcept { peak_ = reserved_; }

  // Memory was mapped or a segment made / memory unmapped or a segment given back.
  void count_growth() noexcept { ++growths_; }
  void count_release() noexcept { ++releases_; }
  [[nodiscard]] std::uint64_t growths() const noexcept { return growths_; }
  [[nodiscard]] std::uint64_t releases() const noexcept { return releases_; }

 private:
  std::atomic<std::size_t> limit_;
  std::size_t reserved_ = 0;
  std::size_t peak_ = 0;
  bool limit_hit_ = false;
  bool counted_in_refused_ = false;
  std::uint64_t growths_ = 0;
  std::uint64_t releases_ = 0;
  pool_accounts* counts_in_ = nullptr;
};

}  // namespace syncmem::mr::detail::caching
