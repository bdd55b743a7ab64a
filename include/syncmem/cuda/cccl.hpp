#pragma once

/// @file cuda/cccl.hpp
/// @brief What syncmem's adaptors to and from CCCL's `cuda::mr` share: the
/// include of `<cuda/memory_resource>`, with the experimental switch older
/// CCCL needs, and the concept of a stream-ordered device resource spelled the
/// way either CCCL spells it.
///
/// Two generations of CCCL are supported. CCCL 3.0 (the CUDA 13.0 toolkit)
/// names the calls `allocate(bytes, alignment)` / `allocate_async(bytes,
/// alignment, stream)` and its refs `resource_ref` / `async_resource_ref`;
/// it hides them unless LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE is
/// defined. Later CCCL (3.1 on, as carried by RMM 26.x) names them
/// `allocate_sync(bytes, alignment)` / `allocate(stream, bytes, alignment)`
/// and its refs `synchronous_resource_ref` / `resource_ref`, with no switch.
/// The adaptors offer both spellings, so that either CCCL takes them.
///
/// Include this (or the adaptors) before any other header includes
/// `<cuda/memory_resource>`, or define
/// LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE for the whole program.

// CCCL 3.0 declares its concepts only under the switch: seen through a header
// included earlier without it, they would be missing, with errors far from here.
#if defined(_CUDA__MEMORY_RESOURCE_RESOURCE_H) && !defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
#error \
    "<cuda/memory_resource> was included before syncmem/cuda/cccl.hpp without \
LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE: include syncmem's header first, or define the macro for the whole program"
#endif
#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif

#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <concepts>
#include <cstddef>

#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::cuda {

/// @brief A stream-ordered resource as CCCL 3.1 and later spell it:
/// `allocate(stream, bytes, alignment)` / `deallocate(stream, p, bytes, alignment)`.
template <class R>
concept cccl_stream_ordered_resource = requires(R& r, ::cuda::stream_ref s, void* p, std::size_t n) {
  { r.allocate(s, n, n) } -> std::same_as<void*>;
  r.deallocate(s, p, n, n);
};

/// @brief A stream-ordered resource as CCCL 3.0 spells it:
/// `allocate_async(bytes, alignment, stream)` / `deallocate_async(p, bytes, alignment, stream)`.
template <class R>
concept cccl_async_resource = requires(R& r, ::cuda::stream_ref s, void* p, std::size_t n) {
  { r.allocate_async(n, n, s) } -> std::same_as<void*>;
  r.deallocate_async(p, n, n, s);
};

/// @brief What mr_upstream takes: a copyable stream-ordered `cuda::mr`
/// resource (or resource_ref) whose memory is device accessible, in either
/// CCCL's spelling: an RMM resource, a CCCL pool, a resource_ref to either.
template <class R>
concept device_accessible_cccl_resource = std::copy_constructible<R> &&
    (cccl_stream_ordered_resource<R> || cccl_async_resource<R>)&&::cuda::has_property<R, ::cuda::mr::device_accessible>;

/// @brief CCCL 3.0's spellings of the calls of an adaptor `A` that has
/// CCCL 3.1's (`allocate_sync` / `deallocate_sync`, `allocate(stream, ...)` /
/// `deallocate(stream, ...)`), so that either CCCL takes it: `A` derives from
/// this and brings its `allocate` and `deallocate` in with `using`.
template <class A>
class cccl_3_0_spellings {
 public:
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment) {
    return self().allocate_sync(bytes, alignment);
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept {
    self().deallocate_sync(p, bytes, alignment);
  }
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream) {
    return self().allocate(stream, bytes, alignment);
  }
  [[nodiscard]] void* allocate_async(std::size_t bytes, ::cuda::stream_ref stream) {
    return self().allocate(stream, bytes, mr::default_alignment);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream) noexcept {
    self().deallocate(stream, p, bytes, alignment);
  }
  void deallocate_async(void* p, std::size_t bytes, ::cuda::stream_ref stream) noexcept {
    self().deallocate(stream, p, bytes, mr::default_alignment);
  }

 private:
  A& self() noexcept { return static_cast<A&>(*this); }
};

}  // namespace syncmem::cuda
