#include "rmm_bridge.hpp"

#include <rmm/aligned.hpp>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/binning_memory_resource.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/mr/statistics_resource_adaptor.hpp>
#include <rmm/resource_ref.hpp>
#include <rmm/version_config.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace syncmem::bench::rmm_bridge {

namespace {

using any_device_resource = cuda::mr::any_resource<cuda::mr::device_accessible>;

// The resource and what measures it: a statistics adaptor between it and
// cudaMalloc counts what it reserves (cuda_async asks its pool instead), one
// on top what it hands out.
struct held {
  rmm::mr::cuda_memory_resource device;
  rmm::mr::statistics_resource_adaptor reserved{device};
  std::optional<rmm::mr::cuda_async_memory_resource> async;
  std::optional<any_device_resource> resource;
  std::optional<rmm::mr::statistics_resource_adaptor> counted;
  std::optional<rmm::device_async_resource_ref> use;
};

}  // namespace

const char* version() noexcept {
  static const std::string v = std::to_string(RMM_VERSION_MAJOR) + "." + std::to_string(RMM_VERSION_MINOR) + "." +
                               std::to_string(RMM_VERSION_PATCH);
  return v.c_str();
}

void* create(const char* kind, int device, bool counted, std::size_t limit, char* error,
             std::size_t error_size) noexcept {
  try {
    if (cudaSetDevice(device) != cudaSuccess) throw std::runtime_error{"cudaSetDevice failed"};
    auto h = std::make_unique<held>();
    const std::string k = kind;
    if (limit != 0 && k != "pool") throw std::invalid_argument{"only RMM's pool takes a limit, not '" + k + "'"};
    if (k == "pool") {
      std::optional<std::size_t> maximum_pool_size;
      if (limit != 0) maximum_pool_size = limit;
      h->resource.emplace(rmm::mr::pool_memory_resource{h->reserved, 0, maximum_pool_size});
    } else if (k == "arena") {
      h->resource.emplace(rmm::mr::arena_memory_resource{h->reserved});
    } else if (k == "binning") {
      h->resource.emplace(rmm::mr::binning_memory_resource{rmm::mr::pool_memory_resource{h->reserved, 0}, 8, 20});
    } else if (k == "cuda_async") {
      h->async.emplace();
      h->resource.emplace(*h->async);
    } else {
      throw std::invalid_argument{"unknown RMM resource kind '" + k + "'"};
    }
    if (counted) {
      h->counted.emplace(rmm::device_async_resource_ref{*h->resource});
      h->use.emplace(*h->counted);
    } else {
      h->use.emplace(*h->resource);
    }
    return h.release();
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return nullptr;
  }
}

void destroy(void* resource) noexcept { delete static_cast<held*>(resource); }

void* allocate(void* resource, std::size_t bytes, void* stream) {
  return static_cast<held*>(resource)->use->allocate(cuda::stream_ref{static_cast<cudaStream_t>(stream)}, bytes,
                                                     rmm::CUDA_ALLOCATION_ALIGNMENT);
}

void deallocate(void* resource, void* p, std::size_t bytes, void* stream) noexcept {
  static_cast<held*>(resource)->use->deallocate(cuda::stream_ref{static_cast<cudaStream_t>(stream)}, p, bytes,
                                                rmm::CUDA_ALLOCATION_ALIGNMENT);
}

void peaks(void* resource, std::size_t* reserved, std::size_t* allocated) noexcept {
  auto* h = static_cast<held*>(resource);
  *reserved = static_cast<std::size_t>(h->reserved.get_bytes_counter().peak);
  if (h->async) {
    cuuint64_t high = 0;
    if (cudaMemPoolGetAttribute(h->async->pool_handle(), cudaMemPoolAttrReservedMemHigh, &high) == cudaSuccess) {
      *reserved = static_cast<std::size_t>(high);
    }
  }
  *allocated = h->counted ? static_cast<std::size_t>(h->counted->get_bytes_counter().peak) : 0;
}

}  // namespace syncmem::bench::rmm_bridge
