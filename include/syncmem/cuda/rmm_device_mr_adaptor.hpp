#pragma once

/// @file cuda/rmm_device_mr_adaptor.hpp
/// @brief device_mr_adaptor for code written against RAPIDS RMM, which
/// catches `rmm::out_of_memory` where memory runs out (RMM's
/// failure_callback_resource_adaptor, spilling in cuDF): needs RMM's headers.

#include <rmm/error.hpp>

#include <cstddef>

#include "syncmem/cuda/device_mr_adaptor.hpp"
#include "syncmem/error.hpp"

namespace syncmem::cuda {

/// @brief A device_mr_adaptor whose allocations throw `rmm::out_of_memory`
/// (with syncmem's message: the request, the device, what the allocator
/// holds) where syncmem throws syncmem::out_of_memory. Both are
/// std::bad_alloc, as `cuda::mr` asks; RMM's own code catches RMM's type.
/// Everything else is device_mr_adaptor's.
class rmm_device_mr_adaptor : public device_mr_adaptor {
 public:
  using device_mr_adaptor::deallocate;
  using device_mr_adaptor::deallocate_sync;
  using device_mr_adaptor::device_mr_adaptor;

  /// @brief device_mr_adaptor::allocate.
  /// @throws rmm::out_of_memory when the memory runs out
  [[nodiscard]] void* allocate(::cuda::stream_ref stream, std::size_t bytes,
                               std::size_t alignment = mr::default_alignment) {
    try {
      return device_mr_adaptor::allocate(stream, bytes, alignment);
    } catch (const out_of_memory& e) {
      throw rmm::out_of_memory{e.what()};
    }
  }
  /// @brief device_mr_adaptor::allocate_sync.
  /// @throws rmm::out_of_memory when the memory runs out
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment = mr::default_alignment) {
    try {
      return device_mr_adaptor::allocate_sync(bytes, alignment);
    } catch (const out_of_memory& e) {
      throw rmm::out_of_memory{e.what()};
    }
  }
};

}  // namespace syncmem::cuda
