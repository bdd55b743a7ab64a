#pragma once

/// @file cuda/pinned_mr_adaptor.hpp
/// @brief A syncmem pinned host resource as a CCCL `cuda::mr` resource,
/// accessible from the host and the device (RMM's
/// `host_device_async_resource_ref`, CCCL's pinned resources).

#include <cstddef>

#include <cuda_runtime_api.h>

#include "syncmem/cuda/cccl.hpp"
#include "syncmem/cuda/interop.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::cuda {

/// @brief Refers to a syncmem resource of CUDA pinned host memory (a
/// caching_pinned_resource, a pinned_resource, an adaptor over either) and
/// offers it through CCCL's `cuda::mr` interface with the properties
/// `cuda::mr::host_accessible` and `cuda::mr::device_accessible` (pinned
/// memory is mapped for the device under unified addressing, as for RMM's
/// pinned_host_memory_resource).
///
/// The stream of allocate and deallocate is any cudaStream_t (host memory
/// belongs to no device); a caching_pinned_resource records its events on the
/// stream of deallocate, on that stream's device, and hands the block out
/// again only after them. `allocate_sync` / `deallocate_sync` use no stream.
///
/// Copies refer to the same resource, which must outlive them; two adaptors
/// are equal when their resources are.
class pinned_mr_adaptor : public cccl_3_0_spellings<pinned_mr_adaptor> {
 public:
  /// @brief Refers to `resource`, which must hand out CUDA pinned host memory
  /// and outlive every copy of the adaptor.
  /// @throws syncmem::logic_error when `resource` hands out another kind of
  ///   memory, pins emulated memory, or is a caching_pinned_resource that may
  ///   fall back to pageable memory (which is not device accessible): make it
  ///   with caching_pinned_options::fallback_to_pageable = false
  explicit pinned_mr_adaptor(mr::memory_resource& resource) : resource_{&resource} { check(resource, resource); }

  /// @brief The syncmem resource referred to.
  [[nodiscard]] mr::memory_resource& resource() const noexcept { return *resource_; }

  /// @brief `bytes` bytes of pinned memory; `stream` is where it is about to be used.
  /// @throws syncmem::out_of_memory (a std::bad_alloc), syncmem::logic_error for a bad alignment
  [[nodiscard]] void* allocate(::cuda::stream_ref stream, std::size_t bytes,
                               std::size_t alignment = mr::default_alignment) {
    return resource_->allocate(bytes, view(stream), alignment);
  }
  /// @brief Returns memory from allocate; `stream` is the stream of last use.
  void deallocate(::cuda::stream_ref stream, void* p, std::size_t bytes,
                  std::size_t alignment = mr::default_alignment) noexcept {
    try {
      resource_->deallocate(p, bytes, view(stream), alignment);
      return;
    } catch (...) {  // NOLINT(bugprone-empty-catch): the stream's device could not be asked
    }
    // The driver would not say the stream's device (a runtime shutting down):
    // wait for the stream, then free as memory no work uses.
    (void)cudaStreamSynchronize(stream.get());
    deallocate_sync(p, bytes, alignment);
  }
  /// @brief Pinned memory for the host and any stream.
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment = mr::default_alignment) {
    return resource_->allocate(bytes, current_default(), alignment);
  }
  /// @brief Returns memory that no work uses any more.
  void deallocate_sync(void* p, std::size_t bytes, std::size_t alignment = mr::default_alignment) noexcept {
    if (auto* caching = dynamic_cast<mr::caching_pinned_resource*>(resource_)) {
      caching->deallocate_host_only(p, bytes, alignment);
      return;
    }
    int device = 0;
    (void)cudaGetDevice(&device);
    resource_->deallocate(p, bytes, detail::stream_access::make(device_id::cuda(device), stream_handle{}), alignment);
  }

  /// @name CCCL 3.0's spellings of the same calls (cccl_3_0_spellings)
  /// @{
  using cccl_3_0_spellings::allocate;
  using cccl_3_0_spellings::deallocate;
  /// @}

  friend bool operator==(const pinned_mr_adaptor& a, const pinned_mr_adaptor& b) noexcept {
    return a.resource_->is_equal(*b.resource_);
  }
  friend void get_property(const pinned_mr_adaptor&, ::cuda::mr::host_accessible) noexcept {}
  friend void get_property(const pinned_mr_adaptor&, ::cuda::mr::device_accessible) noexcept {}

 private:
  // Follows the resources syncmem knows down to where the memory is pinned;
  // an adaptor of another type is taken at its word (its kind).
  static void check(const mr::memory_resource& outer, const mr::memory_resource& r) {
    const auto prefix = "syncmem::cuda::pinned_mr_adaptor: " + outer.name();
    SYNCMEM_EXPECTS(r.kind() == memory_kind::pinned_host,
                    prefix + " hands out " + to_string(r.kind()) + " memory, not pinned host memory");
    if (const auto* pinned = dynamic_cast<const mr::pinned_resource*>(&r)) {
      SYNCMEM_EXPECTS(pinned->backend() == device_kind::cuda,
                      prefix + " pins memory of the " + to_string(pinned->backend()) +
                          " backend, which CUDA devices cannot access; only CUDA pinned memory can be adapted");
    } else if (const auto* caching = dynamic_cast<const mr::caching_pinned_resource*>(&r)) {
      SYNCMEM_EXPECTS(!caching->options().fallback_to_pageable,
                      prefix +
                          " may fall back to pageable memory, which is not device accessible; make it with "
                          "caching_pinned_options::fallback_to_pageable = false");
      check(outer, caching->upstream());
    }
  }
  // A cudaStream_t of any device: the device is asked of the driver, since
  // events about it must be made on it.
  [[nodiscard]] static stream_view view(::cuda::stream_ref s) {
    int device = 0;
    if (s.get() == nullptr) {
      SYNCMEM_CUDA_TRY(cudaGetDevice(&device));
    } else {
      SYNCMEM_CUDA_TRY(cudaStreamGetDevice(s.get(), &device));
    }
    return detail::stream_access::make(device_id::cuda(device), cuda::handle_of(s.get()));
  }
  [[nodiscard]] static stream_view current_default() {
    int device = 0;
    SYNCMEM_CUDA_TRY(cudaGetDevice(&device));
    return detail::stream_access::make(device_id::cuda(device), stream_handle{});
  }

  mr::memory_resource* resource_;
};

}  // namespace syncmem::cuda
