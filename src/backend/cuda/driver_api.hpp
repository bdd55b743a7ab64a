#pragma once

// The few CUDA driver API functions syncmem uses (the virtual memory API,
// pointer ranges, and the calls of every small copy), reached through
// cudaGetDriverEntryPointByVersion so that the library never links libcuda: a
// binary must start on machines without a driver too.

#include <cuda.h>

namespace syncmem::detail::cuda {

struct driver_api {
  CUresult (*mem_create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                         unsigned long long) = nullptr;
  CUresult (*mem_release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*mem_address_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*mem_address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*mem_unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*mem_get_allocation_granularity)(size_t*, const CUmemAllocationProp*,
                                             CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*pointer_get_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*pointer_get_attributes)(unsigned, CUpointer_attribute*, void**, CUdeviceptr) = nullptr;
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  bool loaded = false;  // every pointer above was found
  // Sharing pages of the virtual memory API with other processes (not
  // counted by `loaded`: null where the driver lacks them).
  CUresult (*mem_export_to_shareable_handle)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                                             unsigned long long) = nullptr;
  CUresult (*mem_import_from_shareable_handle)(CUmemGenericAllocationHandle*, void*,
                                               CUmemAllocationHandleType) = nullptr;
  // The calls each small copy makes, straight to the driver: the runtime's
  // wrappers cost about 0.1 us each (H200), and a synced round trip of 4 B
  // (about 8 us) makes six of these calls. The backend makes the runtime's
  // own call instead where one of them is null (`loaded` does not count
  // them), and where it fails with CUDA_ERROR_INVALID_CONTEXT: on a thread
  // the runtime has not bound a context to yet, which the runtime's call does.
  // A failed call enqueued nothing, so making it again is safe.
  CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  // The current device, read by every outermost device_guard: a fifth of
  // cudaGetDevice's cost (H200). Fails where no context is current, where the
  // runtime's call answers instead.
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
};

// Loaded on first use; `loaded` is false where the driver lacks any of them.
[[nodiscard]] const driver_api& driver() noexcept;

}  // namespace syncmem::detail::cuda

// Like SYNCMEM_CUDA_TRY, for driver calls (CUresult).
#define SYNCMEM_CU_TRY(call)                                                                      \
  do {                                                                                            \
    const CUresult syncmem_cu_status_ = (call);                                                   \
    if (syncmem_cu_status_ != CUDA_SUCCESS) [[unlikely]] {                                        \
      ::syncmem::detail::cuda::throw_driver_error(syncmem_cu_status_, #call, __FILE__, __LINE__); \
    }                                                                                             \
  } while (false)

namespace syncmem::detail::cuda {
[[noreturn]] void throw_driver_error(CUresult code, const char* call, const char* file, int line);

// Whether a driver call with a runtime twin did the work (see driver_api):
// false where no context is current on this thread yet, for the runtime's
// call to bind one and do it; other errors are thrown, under the runtime's
// name for the code (the runtime's codes are the driver's).
[[nodiscard]] bool driver_did(CUresult status, const char* call, const char* file, int line);
}  // namespace syncmem::detail::cuda
