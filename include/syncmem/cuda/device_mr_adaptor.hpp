#pragma once

/// @file cuda/device_mr_adaptor.hpp
/// @brief A syncmem device resource as a CCCL `cuda::mr` resource: what
/// `rmm::device_buffer`, `rmm::device_uvector`, `rmm::exec_policy` and any
/// code written against `cuda::mr::resource_ref<device_accessible>` or
/// `rmm::device_async_resource_ref` take.

#include <cstddef>
#include <string>

#include <cuda_runtime_api.h>

#include "syncmem/cuda/cccl.hpp"
#include "syncmem/cuda/interop.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::cuda {

/// @brief Refers to a syncmem device resource of a CUDA device (a
/// caching_resource, the per-device default, a cuda_async_resource, an adaptor
/// over any of them) and offers it through CCCL's `cuda::mr` interface, with
/// the property `cuda::mr::device_accessible`.
///
/// It satisfies `cuda::mr::resource_with<device_accessible>` (the
/// stream-ordered concept: `async_resource_with` in CCCL 3.0), so that
/// `cuda::mr::resource_ref<cuda::mr::device_accessible>{adaptor}` and
/// `rmm::device_async_resource_ref{adaptor}` refer to it, and
/// `cuda::mr::any_resource` or RMM's adaptors can hold a copy of it.
///
/// The stream contract is syncmem's (mr::memory_resource), and it is the one
/// `cuda::mr` states: memory allocated on a stream is usable by work enqueued
/// on it later; deallocate names the stream of last use. Streams are
/// `cudaStream_t`s of the resource's device (cudaStreamPerThread is served
/// as the legacy default stream). `allocate_sync` allocates on the
/// device's legacy default stream and waits for that stream, so that the
/// memory is usable at once by any stream (as RMM's resources do);
/// `deallocate_sync` promises that no work uses the memory any more.
///
/// Copies refer to the same resource, which must outlive them. Two adaptors
/// are equal when their resources are (memory from one may be freed through
/// the other). Thread safety: that of the resource (every syncmem resource may
/// be called from many threads).
///
/// Only resources of CUDA devices: `cuda::mr` hands out `cudaStream_t`s, which
/// an emulated device cannot run, and its memory would not be accessible to
/// the CUDA kernels the property promises.
class device_mr_adaptor : public cccl_3_0_spellings<device_mr_adaptor> {
 public:
  /// @brief Refers to `resource`, which must be a device resource of a CUDA
  /// device and outlive every copy of the adaptor.
  /// @throws syncmem::logic_error when `resource` is a host resource or belongs
  ///   to an emulated device (the message names it)
  explicit device_mr_adaptor(mr::memory_resource& resource) : resource_{&resource}, device_{checked(resource)} {}

  /// @brief The syncmem resource referred to.
  [[nodiscard]] mr::memory_resource& resource() const noexcept { return *resource_; }
  /// @brief The CUDA device of its memory.
  [[nodiscard]] device_id device() const noexcept { return device_; }

  /// @brief `bytes` bytes usable by work enqueued on `stream` after the call
  /// (`stream` a cudaStream_t of device()).
  /// @throws syncmem::out_of_memory (a std::bad_alloc), syncmem::logic_error
  ///   for an alignment that is not a power of two or above the resource's maximum
  [[nodiscard]] void* allocate(::cuda::stream_ref stream, std::size_t bytes,
                               std::size_t alignment = mr::default_alignment) {
    return resource_->allocate(bytes, view(stream), alignment);
  }
  /// @brief Returns memory from allocate; `stream` is the stream of last use.
  void deallocate(::cuda::stream_ref stream, void* p, std::size_t bytes,
                  std::size_t alignment = mr::default_alignment) noexcept {
    resource_->deallocate(p, bytes, view(stream), alignment);
  }
  /// @brief Memory usable at once by any stream and the host's calls: allocated
  /// on the legacy default stream, which is then waited for.
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment = mr::default_alignment) {
    const stream_view s = default_stream(device_);
    void* p = resource_->allocate(bytes, s, alignment);
    try {
      s.synchronize();
    } catch (...) {
      resource_->deallocate(p, bytes, s, alignment);
      throw;
    }
    return p;
  }
  /// @brief Returns memory that no work uses any more.
  void deallocate_sync(void* p, std::size_t bytes, std::size_t alignment = mr::default_alignment) noexcept {
    resource_->deallocate(p, bytes, detail::stream_access::make(device_, stream_handle{}), alignment);
  }

  /// @name CCCL 3.0's spellings of the same calls (cccl_3_0_spellings)
  /// @{
  using cccl_3_0_spellings::allocate;
  using cccl_3_0_spellings::deallocate;
  /// @}

  /// @brief Equal when memory from one may be freed through the other.
  friend bool operator==(const device_mr_adaptor& a, const device_mr_adaptor& b) noexcept {
    return a.resource_->is_equal(*b.resource_);
  }
  /// @brief Its memory is device memory.
  friend void get_property(const device_mr_adaptor&, ::cuda::mr::device_accessible) noexcept {}

 private:
  static device_id checked(const mr::memory_resource& r) {
    SYNCMEM_EXPECTS(r.kind() == memory_kind::device && r.device().has_value(),
                    "syncmem::cuda::device_mr_adaptor: " + r.name() + " hands out " + to_string(r.kind()) +
                        " memory, not device memory (pinned host resources: pinned_mr_adaptor)");
    SYNCMEM_EXPECTS(r.device()->kind() == device_kind::cuda,
                    "syncmem::cuda::device_mr_adaptor: " + r.name() + " belongs to " + to_string(*r.device()) +
                        "; cuda::mr works on cudaStream_t streams and CUDA-accessible memory, so only resources "
                        "of CUDA devices can be adapted");
    return *r.device();
  }
  // The resource checks that streams belong to its device; a cudaStream_t
  // does not say its device without a driver call, so it is taken as the
  // resource's (as cudaMallocAsync takes it). cudaStreamPerThread names
  // another stream on every thread while syncmem's resources know streams by
  // handle, so it is taken as the legacy default stream, with which every
  // per-thread default stream synchronizes both ways (cudaStreamLegacy is that
  // stream under its other name).
  [[nodiscard]] stream_view view(::cuda::stream_ref s) const noexcept {
    cudaStream_t handle = s.get();
    if (handle == cudaStreamPerThread || handle == cudaStreamLegacy) handle = nullptr;
    return detail::stream_access::make(device_, cuda::handle_of(handle));
  }

  mr::memory_resource* resource_;
  device_id device_;
};

}  // namespace syncmem::cuda
