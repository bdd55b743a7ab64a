#pragma once

/// @file mr/statistics_adaptor.hpp
/// @brief Counts what passes through to an upstream resource.

#include <cstdint>
#include <mutex>

#include "syncmem/mr/adaptor_base.hpp"

namespace syncmem::mr {

/// @brief A quantity that goes up and down: now, its peak, and the total ever added.
struct usage_counter {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t total = 0;
};

/// @brief What a statistics_adaptor has counted.
struct resource_statistics {
  usage_counter bytes;        ///< bytes asked for by live allocations
  usage_counter allocations;  ///< live allocations
  std::int64_t deallocations = 0;
  std::int64_t failed_allocations = 0;  ///< allocate calls that threw
};

/// @brief Forwards every call to its upstream and counts bytes and
/// allocations: current, peak and total, exactly (under a lock). Zero-byte
/// requests are not counted (they never reach a resource).
///
/// Device, kind and alignment are the upstream's; see memory_resource for the
/// contract. Thread safety: as every resource.
class statistics_adaptor final : public adaptor_base<statistics_adaptor> {
 public:
  static constexpr const char* adaptor_name = "statistics_adaptor";

  /// @param upstream the resource allocations go to; must outlive the adaptor
  explicit statistics_adaptor(memory_resource& upstream);

  /// @brief The counts so far.
  [[nodiscard]] resource_statistics statistics() const;
  /// @brief Sets each peak to its current value.
  void reset_peaks();

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;

  mutable std::mutex mutex_;
  resource_statistics statistics_;
};

}  // namespace syncmem::mr
