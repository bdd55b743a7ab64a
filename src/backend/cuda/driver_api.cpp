#include "backend/cuda/driver_api.hpp"

#include <cuda_runtime_api.h>

#include "core/log.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::cuda {
namespace {

template <class F>
bool load(F& fn, const char* symbol, unsigned version) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, version, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<F>(p);
  return true;
}

}  // namespace

const driver_api& driver() noexcept {
  static const driver_api api = [] {
    driver_api a;
    bool ok = true;
    ok &= load(a.mem_create, "cuMemCreate", 10020);
    ok &= load(a.mem_release, "cuMemRelease", 10020);
    ok &= load(a.mem_address_reserve, "cuMemAddressReserve", 10020);
    ok &= load(a.mem_address_free, "cuMemAddressFree", 10020);
    ok &= load(a.mem_map, "cuMemMap", 10020);
    ok &= load(a.mem_unmap, "cuMemUnmap", 10020);
    ok &= load(a.mem_set_access, "cuMemSetAccess", 10020);
    ok &= load(a.mem_get_allocation_granularity, "cuMemGetAllocationGranularity", 10020);
    ok &= load(a.pointer_get_attribute, "cuPointerGetAttribute", 4000);
    ok &= load(a.pointer_get_attributes, "cuPointerGetAttributes", 7000);
    ok &= load(a.device_get_attribute, "cuDeviceGetAttribute", 2000);
    ok &= load(a.get_error_name, "cuGetErrorName", 6000);
    ok &= load(a.get_error_string, "cuGetErrorString", 6000);
    a.loaded = ok;
    load(a.mem_export_to_shareable_handle, "cuMemExportToShareableHandle", 10020);
    load(a.mem_import_from_shareable_handle, "cuMemImportFromShareableHandle", 10020);
    load(a.memcpy_async, "cuMemcpyAsync", 4000);
    load(a.event_record, "cuEventRecord", 2000);
    load(a.stream_is_capturing, "cuStreamIsCapturing", 10000);
    load(a.stream_synchronize, "cuStreamSynchronize", 2000);
    load(a.ctx_get_device, "cuCtxGetDevice", 2000);
    return a;
  }();
  return api;
}

void throw_driver_error(CUresult code, const char* call, const char* file, int line) {
  const char* name = "CUDA_ERROR_UNKNOWN";
  const char* message = "unknown driver error";
  const auto& api = driver();
  if (api.get_error_name != nullptr) api.get_error_name(code, &name);
  if (api.get_error_string != nullptr) api.get_error_string(code, &message);
  throw cuda_error{static_cast<int>(code), name, message, call, short_path(file), line};
}

bool driver_did(CUresult status, const char* call, const char* file, int line) {
  if (status == CUDA_SUCCESS) return true;
  if (status == CUDA_ERROR_INVALID_CONTEXT) return false;
  syncmem::detail::throw_cuda_error(static_cast<int>(status), call, file, line);
}

}  // namespace syncmem::detail::cuda
