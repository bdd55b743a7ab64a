#pragma once

// RAPIDS RMM's device resources for the allocator suite, behind plain
// functions: the bridge is compiled with RMM's headers (and its CCCL), which
// stay out of the rest of the benchmarks.

#include <cstddef>

namespace syncmem::bench::rmm_bridge {

/// @brief RMM's version, e.g. "26.10.0".
[[nodiscard]] const char* version() noexcept;

/// @brief A new RMM resource on CUDA device `device`: kind is "pool" (a
/// pool_memory_resource over cudaMalloc, growing from empty), "arena"
/// (arena_memory_resource over cudaMalloc, RMM's default arena size),
/// "binning" (binning_memory_resource with bins of 256 B..1 MiB over such a
/// pool) or "cuda_async" (cuda_async_memory_resource). With `counted`, a
/// statistics adaptor on top counts what is allocated. A `limit` other than
/// 0 is the pool's maximum_pool_size (kind "pool" only; a multiple of 256).
/// nullptr, with the reason in `error`, when RMM refuses.
[[nodiscard]] void* create(const char* kind, int device, bool counted, std::size_t limit, char* error,
                           std::size_t error_size) noexcept;
void destroy(void* resource) noexcept;

/// @brief Stream-ordered allocate on `stream` (a cudaStream_t).
/// @throws std::bad_alloc (rmm::out_of_memory) when RMM cannot serve it
[[nodiscard]] void* allocate(void* resource, std::size_t bytes, void* stream);
void deallocate(void* resource, void* p, std::size_t bytes, void* stream) noexcept;

/// @brief The peaks since creation: bytes taken from the device (reserved)
/// and, when created counted, bytes handed out (allocated; else 0).
void peaks(void* resource, std::size_t* reserved, std::size_t* allocated) noexcept;

}  // namespace syncmem::bench::rmm_bridge
