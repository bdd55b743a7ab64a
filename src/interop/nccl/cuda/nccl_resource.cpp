#include "syncmem/nccl/nccl_resource.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <fmt/format.h>

#include "core/ignored_failure.hpp"
#include "nccl_check.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"

namespace syncmem::nccl {

namespace {
device_id checked_cuda(device_id device) {
  SYNCMEM_EXPECTS(device.kind() == device_kind::cuda,
                  fmt::format("nccl_resource: {} is not a CUDA device: ncclMemAlloc allocates CUDA memory only",
                              to_string(device)));
  check_device(device);
  return device;
}
}  // namespace

// 256: the alignment every syncmem device resource offers; ncclMemAlloc's
// memory is aligned to the allocation granularity, far more.
nccl_resource::nccl_resource(device_id device)
    : mr::memory_resource{memory_kind::device, checked_cuda(device), mr::default_alignment} {}

std::string nccl_resource::name() const { return fmt::format("nccl_resource({})", to_string(*device())); }

void* nccl_resource::do_allocate(std::size_t bytes, stream_view, std::size_t) {
  device_guard guard{*device()};
  void* p = nullptr;
  const ncclResult_t r = ncclMemAlloc(&p, bytes);
  if (r == ncclSuccess && p != nullptr) return p;
  oom_info info;
  info.requested = bytes;
  info.device = *device();
  info.resource = name();
  try {
    const auto m = get_memory_info(*device());
    info.device_free = m.free;
    info.device_total = m.total;
  } catch (...) {
    // the figures are optional
    syncmem::detail::log_ignored("asking the device's free memory for an out-of-memory report");
  }
  info.hint = fmt::format("ncclMemAlloc: {} ({})", detail::nccl_error_name(r), ncclGetErrorString(r));
  SYNCMEM_OUT_OF_MEMORY(std::move(info));
}

void nccl_resource::do_deallocate(void* p, std::size_t, stream_view stream, std::size_t) noexcept {
  try {
    device_guard guard{*device()};
    stream.synchronize();  // ncclMemFree is not stream-ordered
    SYNCMEM_NCCL_CHECK_NOEXCEPT(ncclMemFree(p));
  } catch (...) {
    // the device is gone, and the memory with it
    syncmem::detail::log_ignored("freeing NCCL memory");
  }
}

bool nccl_resource::do_is_equal(const mr::memory_resource& other) const noexcept {
  const auto* o = dynamic_cast<const nccl_resource*>(&other);
  return o != nullptr && o->device() == device();
}

}  // namespace syncmem::nccl
