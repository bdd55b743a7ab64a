// Compiled with libtorch's include directories and ABI setting only; see
// torch_bridge.hpp.
#include "torch_bridge.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#if __has_include(<c10/core/AllocatorConfig.h>)
#include <c10/core/AllocatorConfig.h>
#define SYNCMEM_TORCH_HAS_ALLOCATOR_CONFIG 1
#endif

#include <cstdio>
#include <exception>
#include <mutex>
#include <string>

namespace syncmem::bench::torch_bridge {

namespace {

void copy_message(const char* text, char* error, std::size_t error_size) {
  if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", text);
}

std::once_flag init_once;
bool init_ok = false;
std::string init_error;

void apply_settings(const std::string& settings) {
#ifdef SYNCMEM_TORCH_HAS_ALLOCATOR_CONFIG
  c10::CachingAllocator::setAllocatorSettings(settings);
#else
  c10::cuda::CUDACachingAllocator::setAllocatorSettings(settings);
#endif
}

}  // namespace

bool init(char* error, std::size_t error_size) noexcept {
  std::call_once(init_once, [] {
    try {
      c10::cuda::CUDACachingAllocator::init(static_cast<int>(c10::cuda::device_count()));
      init_ok = true;
    } catch (const std::exception& e) {
      init_error = e.what();
    }
  });
  if (!init_ok) copy_message(init_error.c_str(), error, error_size);
  return init_ok;
}

const char* version() noexcept { return SYNCMEM_TORCH_VERSION_STRING; }  // as the torch package reported it

void* allocate(std::size_t bytes, void* stream) noexcept {
  try {
    return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, static_cast<cudaStream_t>(stream));
  } catch (...) {
    return nullptr;
  }
}

void deallocate(void* p) noexcept {
  try {
    c10::cuda::CUDACachingAllocator::raw_delete(p);
  } catch (...) {  // NOLINT(bugprone-empty-catch)
  }
}

void empty_cache() noexcept {
  try {
    c10::cuda::CUDACachingAllocator::emptyCache();
  } catch (...) {  // NOLINT(bugprone-empty-catch)
  }
}

void reset_peaks(int device) noexcept {
  try {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
  } catch (...) {  // NOLINT(bugprone-empty-catch)
  }
}

bool peaks(int device, std::size_t* reserved, std::size_t* allocated) noexcept {
  try {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    *reserved = static_cast<std::size_t>(stats.reserved_bytes[0].peak);  // [0]: StatType::AGGREGATE
    *allocated = static_cast<std::size_t>(stats.allocated_bytes[0].peak);
    return true;
  } catch (...) {
    return false;
  }
}

bool set_memory_fraction(int device, double fraction, char* error, std::size_t error_size) noexcept {
  try {
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(device));
    return true;
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_size);
    return false;
  }
}

bool set_expandable(bool on, char* error, std::size_t error_size) noexcept {
  try {
    apply_settings(on ? "expandable_segments:True" : "expandable_segments:False");
    return true;
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_size);
    return false;
  }
}

}  // namespace syncmem::bench::torch_bridge
