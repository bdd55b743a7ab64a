#pragma once

/// @file cuda/mr_upstream.hpp
/// @brief Any stream-ordered CCCL `cuda::mr` device resource (an RMM
/// resource, a CCCL pool, a resource_ref to either) as a syncmem memory
/// resource: under syncmem's adaptors, as the upstream of syncmem's
/// containers, as synced_memory's device resource.

#include <cstddef>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "syncmem/cuda/cccl.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::cuda {

/// @brief A syncmem device resource of one CUDA device whose memory comes
/// from a `cuda::mr` resource, e.g. `rmm::mr::pool_memory_resource`.
///
/// The stream contracts are the same: memory allocated on a stream is usable
/// by work enqueued on it later, and deallocate names the stream of last use
/// (`cuda::mr` resources order reuse on other streams themselves, as RMM's
/// pools do with events). So allocate(bytes, s) calls the resource's
/// stream-ordered allocate with s's cudaStream_t, and deallocate likewise.
/// Zero bytes and alignment checks are syncmem's (memory_resource); a
/// std::bad_alloc from the resource (rmm::out_of_memory is one) becomes
/// syncmem::out_of_memory naming the request and this resource.
///
/// The resource is held by value, as CCCL's `any_resource` holds it: RMM's
/// resources share their state when copied, so a copy is the same pool; to
/// refer to one without owning a share, pass a
/// `cuda::mr::resource_ref<cuda::mr::device_accessible>` (CCCL 3.0:
/// `async_resource_ref`), or an `rmm::device_async_resource_ref`.
///
/// Equal to another mr_upstream over the same resource type whose resources
/// compare equal. Thread safety: that of the resource (RMM's resources may be
/// called from many threads).
class mr_upstream final : public mr::memory_resource {
 public:
  /// @brief Memory of CUDA device `device` from `resource`, which must hand
  /// out memory of that device, with alignments up to `max_alignment` (RMM's
  /// resources: 256).
  /// @throws syncmem::logic_error when `device` is not a valid CUDA device
  ///   (cuda::mr works on cudaStream_t streams: emulated devices cannot be
  ///   served), or `max_alignment` is not a power of two
  template <device_accessible_cccl_resource Resource>
  mr_upstream(Resource resource, device_id device, std::size_t max_alignment = mr::default_alignment)
      : memory_resource{memory_kind::device, checked(device, max_alignment), max_alignment},
        held_{std::make_shared<Resource>(std::move(resource))},
        calls_{&calls_for<Resource>} {}

  [[nodiscard]] std::string name() const override { return "mr_upstream(" + to_string(*device()) + ")"; }

 private:
  // One table per resource type: how to call it, and a tag that tells types apart.
  struct calls {
    void* (*allocate)(void* r, ::cuda::stream_ref s, std::size_t bytes, std::size_t alignment);
    void (*deallocate)(void* r, ::cuda::stream_ref s, void* p, std::size_t bytes, std::size_t alignment);
    bool (*equal)(const void* a, const void* b) noexcept;
  };

  template <class R>
  static void* allocate_in(void* r, ::cuda::stream_ref s, std::size_t bytes, std::size_t alignment) {
    if constexpr (cccl_stream_ordered_resource<R>) {
      return static_cast<R*>(r)->allocate(s, bytes, alignment);
    } else {
      return static_cast<R*>(r)->allocate_async(bytes, alignment, s);
    }
  }
  template <class R>
  static void deallocate_in(void* r, ::cuda::stream_ref s, void* p, std::size_t bytes, std::size_t alignment) {
    if constexpr (cccl_stream_ordered_resource<R>) {
      static_cast<R*>(r)->deallocate(s, p, bytes, alignment);
    } else {
      static_cast<R*>(r)->deallocate_async(p, bytes, alignment, s);
    }
  }
  template <class R>
  static bool equal_in(const void* a, const void* b) noexcept {
    return *static_cast<const R*>(a) == *static_cast<const R*>(b);
  }
  template <class R>
  static constexpr calls calls_for{&allocate_in<R>, &deallocate_in<R>, &equal_in<R>};

  static device_id checked(device_id device, std::size_t max_alignment) {
    SYNCMEM_EXPECTS(device.kind() == device_kind::cuda,
                    "syncmem::cuda::mr_upstream: the device " + to_string(device) +
                        " is not a CUDA device; cuda::mr resources work on cudaStream_t streams, so only CUDA "
                        "devices can be served");
    SYNCMEM_EXPECTS(
        max_alignment != 0 && (max_alignment & (max_alignment - 1)) == 0,
        "syncmem::cuda::mr_upstream: max_alignment " + std::to_string(max_alignment) + " is not a power of two");
    check_device(device);
    return device;
  }

  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override {
    try {
      return calls_->allocate(held_.get(), ::cuda::stream_ref{stream.native_handle()}, bytes, alignment);
    } catch (const out_of_memory&) {
      throw;
    } catch (const std::bad_alloc& e) {
      oom_info info;
      info.requested = bytes;
      info.device = device();
      info.resource = name();
      info.hint = std::string{"the cuda::mr resource said: "} + e.what();
      throw out_of_memory{std::move(info)};
    }
  }
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override {
    try {
      calls_->deallocate(held_.get(), ::cuda::stream_ref{stream.native_handle()}, p, bytes, alignment);
    } catch (...) {  // NOLINT(bugprone-empty-catch): deallocate must not throw; cuda::mr's deallocate does not
    }
  }
  [[nodiscard]] bool do_is_equal(const mr::memory_resource& other) const noexcept override {
    const auto* o = dynamic_cast<const mr_upstream*>(&other);
    return o != nullptr && o->calls_ == calls_ && o->device() == device() && calls_->equal(held_.get(), o->held_.get());
  }

  std::shared_ptr<void> held_;
  const calls* calls_;
};

}  // namespace syncmem::cuda
