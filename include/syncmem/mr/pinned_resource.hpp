#pragma once

/// @file mr/pinned_resource.hpp
/// @brief Page-locked (pinned) host memory from cudaHostAlloc.

#include "syncmem/device_id.hpp"
#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::mr {

/// @brief Flags of cudaHostAlloc.
struct pinned_flags {
  bool portable = true;         ///< pinned for every CUDA context, not only the current one
  bool mapped = false;          ///< mapped into the device address space
  bool write_combined = false;  ///< write-combined: fast host writes and DMA reads, slow host reads
};

/// @brief Pinned host memory, page-aligned: cudaHostAlloc for CUDA, emulated
/// pinned memory for emulated devices. Every call pins afresh (milliseconds on
/// CUDA); caching_pinned_resource reuses blocks. Streams are not used. When
/// pinning fails for lack of resources it throws syncmem::out_of_memory. See
/// memory_resource for the contract.
class pinned_resource final : public memory_resource {
 public:
  /// @brief Pinned memory of the backend of `backend` (CUDA or emulated).
  /// @throws syncmem::unsupported_error when that backend has no devices
  explicit pinned_resource(device_kind backend, pinned_flags flags = {});
  [[nodiscard]] std::string name() const override;
  [[nodiscard]] pinned_flags flags() const noexcept { return flags_; }
  [[nodiscard]] device_kind backend() const noexcept { return backend_; }

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override;

  pinned_flags flags_;
  device_kind backend_;
};

}  // namespace syncmem::mr
