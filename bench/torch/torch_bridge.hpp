#pragma once

// PyTorch's CUDA caching allocator (c10::cuda::CUDACachingAllocator), seen
// through plain functions: the one file behind them is compiled with
// libtorch's headers and ABI setting (_GLIBCXX_USE_CXX11_ABI), which must not
// leak into the rest of the benchmarks, so nothing here passes a standard
// library type. Built only when CMake finds the torch Python package
// (SYNCMEM_WITH_TORCH); the benchmarks then define SYNCMEM_BENCH_HAS_TORCH.

#include <cstddef>

namespace syncmem::bench::torch_bridge {

// Initialises the allocator for every CUDA device; false (and a message in
// `error`) when it cannot. Safe to call more than once.
bool init(char* error, std::size_t error_size) noexcept;
// The version of libtorch, e.g. "2.11.0+cu130".
const char* version() noexcept;

// raw_alloc_with_stream / raw_delete on the current CUDA device; `stream` is
// a cudaStream_t. nullptr when it fails (out of memory).
void* allocate(std::size_t bytes, void* stream) noexcept;
void deallocate(void* p) noexcept;

// emptyCache; resetPeakStats; the peaks of reserved_bytes and
// allocated_bytes (aggregate) from getDeviceStats.
void empty_cache() noexcept;
void reset_peaks(int device) noexcept;
bool peaks(int device, std::size_t* reserved, std::size_t* allocated) noexcept;

// Caps what the allocator reserves on `device` at `fraction` of the
// device's memory (setMemoryFraction, as torch.cuda.
// set_per_process_memory_fraction); 1.0 lifts the cap. false when refused.
bool set_memory_fraction(int device, double fraction, char* error, std::size_t error_size) noexcept;

// Turns expandable segments on or off (setAllocatorSettings); false when
// this libtorch refuses.
bool set_expandable(bool on, char* error, std::size_t error_size) noexcept;

}  // namespace syncmem::bench::torch_bridge
