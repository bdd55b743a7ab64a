#pragma once

/// @file mr/tracking_adaptor.hpp
/// @brief Keeps every live allocation with its label, and reports leaks.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "syncmem/mr/adaptor_base.hpp"

namespace syncmem::mr {

/// @brief One live allocation, as a tracking_adaptor saw it made.
struct tracked_allocation {
  const void* pointer = nullptr;
  std::size_t bytes = 0;
  std::size_t alignment = 0;
  std::string label;           ///< mr::current_allocation_label() when it was made
  std::uintptr_t stream = 0;   ///< the stream's native handle
  std::uint64_t sequence = 0;  ///< 1 for the adaptor's first allocation, then 2, ...
};

/// @brief Forwards to its upstream and keeps every live allocation (pointer,
/// size, alignment, stream, the allocation label in force, and its order), so
/// that what is still allocated can be listed and reported as leaks.
///
/// A deallocation of a pointer the adaptor does not hold (a double free, or
/// memory from elsewhere) is logged and not forwarded. The adaptor logs its
/// leak report when destroyed with allocations live.
///
/// Device, kind and alignment are the upstream's; see memory_resource for the
/// contract. Thread safety: as every resource.
class tracking_adaptor final : public adaptor_base<tracking_adaptor> {
 public:
  static constexpr const char* adaptor_name = "tracking_adaptor";

  /// @param upstream the resource allocations go to; must outlive the adaptor
  explicit tracking_adaptor(memory_resource& upstream);
  ~tracking_adaptor() override;

  /// @brief The live allocations, oldest first.
  [[nodiscard]] std::vector<tracked_allocation> live_allocations() const;
  [[nodiscard]] std::size_t live_count() const;
  [[nodiscard]] std::size_t live_bytes() const;
  /// @brief A report of what is live, for people: totals, then per label
  /// (largest first) the count and bytes, then the oldest allocations.
  /// Empty when nothing is live.
  [[nodiscard]] std::string leak_report() const;

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override;

  mutable std::mutex mutex_;
  std::unordered_map<const void*, tracked_allocation> live_;
  std::size_t live_bytes_ = 0;
  std::uint64_t next_sequence_ = 1;
};

}  // namespace syncmem::mr
