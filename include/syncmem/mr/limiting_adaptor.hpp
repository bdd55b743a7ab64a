#pragma once

/// @file mr/limiting_adaptor.hpp
/// @brief Caps the bytes allocated through an upstream resource.

#include <atomic>
#include <cstddef>

#include "syncmem/mr/adaptor_base.hpp"

namespace syncmem::mr {

/// @brief Forwards to its upstream while the bytes allocated through it stay
/// within a limit; an allocation that would pass the limit throws
/// syncmem::out_of_memory (with `limit` and `in_use` filled in) without
/// reaching the upstream. Bytes are counted as asked for.
///
/// Device, kind and alignment are the upstream's; see memory_resource for the
/// contract. Thread safety: as every resource; the limit holds under
/// concurrent allocations.
class limiting_adaptor final : public adaptor_base<limiting_adaptor> {
 public:
  static constexpr const char* adaptor_name = "limiting_adaptor";

  /// @param upstream the resource allocations go to; must outlive the adaptor
  /// @param limit_bytes the most bytes that may be allocated at once
  limiting_adaptor(memory_resource& upstream, std::size_t limit_bytes);

  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }
  /// @brief Bytes allocated through the adaptor now.
  [[nodiscard]] std::size_t allocated_bytes() const noexcept { return allocated_.load(std::memory_order_relaxed); }

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;

  std::size_t limit_;
  std::atomic<std::size_t> allocated_{0};
};

}  // namespace syncmem::mr
