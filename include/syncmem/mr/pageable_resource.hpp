#pragma once

/// @file mr/pageable_resource.hpp
/// @brief Ordinary (pageable) host memory, aligned.

#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::mr {

/// @brief Pageable host memory from aligned operator new, for any alignment
/// that is a power of two up to 1 MiB. Streams are not used. See
/// memory_resource for the contract.
class pageable_resource final : public memory_resource {
 public:
  pageable_resource() noexcept;
  [[nodiscard]] std::string name() const override { return "pageable_resource"; }

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override;
};

}  // namespace syncmem::mr
