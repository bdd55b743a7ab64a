#include "backend/cuda/cuda_vmm.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <vector>

#include "backend/cuda/driver_api.hpp"
#include "core/log.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::cuda {
namespace {
CUmemAllocationProp allocation_prop(int index) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = index;
  return prop;
}

// The descriptors kept for exported allocations: at most a quarter of the
// process's, leaving the rest to the program (as emulated devices keep their files).
std::size_t most_shareable_fds() {
  static const std::size_t most = [] {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::size_t{256};
    return static_cast<std::size_t>(limit.rlim_cur / 4);
  }();
  return most;
}

struct exported_file {
  explicit exported_file(int descriptor) noexcept : fd{descriptor} {}
  exported_file(const exported_file&) = delete;
  exported_file& operator=(const exported_file&) = delete;
  ~exported_file() { ::close(fd); }
  int fd;
};
}  // namespace

std::size_t cuda_vmm::granularity(int index) {
  const auto& api = driver();
  if (!api.loaded) return 0;
  int supported = 0;
  if (api.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, index) !=
          CUDA_SUCCESS ||
      supported == 0) {
    return 0;
  }
  auto prop = allocation_prop(index);
  size_t granularity = 0;
  SYNCMEM_CU_TRY(api.mem_get_allocation_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  return granularity;
}

void* cuda_vmm::reserve(int, std::size_t bytes) {
  CUdeviceptr p = 0;
  SYNCMEM_CU_TRY(driver().mem_address_reserve(&p, bytes, 0, 0, 0));
  mappings_.reserved(reinterpret_cast<void*>(p), bytes);
  return reinterpret_cast<void*>(p);
}

void cuda_vmm::free_address(int, void* p, std::size_t bytes) noexcept {
  mappings_.freed(p);
  const CUresult status = driver().mem_address_free(reinterpret_cast<CUdeviceptr>(p), bytes);
  if (status != CUDA_SUCCESS && status != CUDA_ERROR_DEINITIALIZED) {
    logger().error("cuMemAddressFree failed: {}", static_cast<int>(status));
  }
}

bool cuda_vmm::exportable(int index) const noexcept {
  return index >= 0 && static_cast<std::size_t>(index) < exportable_.size() &&
         exportable_[static_cast<std::size_t>(index)].load(std::memory_order_relaxed) == 1;
}

// Pages are made exportable as POSIX file descriptors, as PyTorch's
// expandable segments are; a driver that refuses the handle type gets pages
// without it, for good on that device.
physical_handle cuda_vmm::create(int index, std::size_t bytes) {
  auto prop = allocation_prop(index);
  CUmemGenericAllocationHandle handle = 0;
  std::atomic<int>* exportable =
      static_cast<std::size_t>(index) < exportable_.size() ? &exportable_[static_cast<std::size_t>(index)] : nullptr;
  CUresult status = CUDA_ERROR_NOT_SUPPORTED;
  if (exportable != nullptr && exportable->load(std::memory_order_relaxed) != 2) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    status = driver().mem_create(&handle, bytes, &prop, 0);
    if (status == CUDA_SUCCESS) {
      exportable->store(1, std::memory_order_relaxed);
      return handle;
    }
    if (status == CUDA_ERROR_OUT_OF_MEMORY) return 0;
    exportable->store(2, std::memory_order_relaxed);
    logger().debug("cuMemCreate with POSIX file descriptors refused ({}) on cuda:{}: its pages cannot be shared",
                   static_cast<int>(status), index);
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  }
  status = driver().mem_create(&handle, bytes, &prop, 0);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) return 0;
  SYNCMEM_CU_TRY(status);
  return handle;
}

// Exported once: a new descriptor per share cost the driver an export, and a
// close when the share ended, for every page of every share.
std::shared_ptr<const int> cuda_vmm::shareable_fd(physical_handle h) {
  std::vector<std::shared_ptr<const int>> evicted;  // closed after the lock is let go
  std::lock_guard lock{shareable_mutex_};
  if (const auto it = shareable_.find(h); it != shareable_.end()) return it->second;
  if (shareable_.size() >= most_shareable_fds()) {
    for (auto it = shareable_.begin(); it != shareable_.end();) {
      if (it->second.use_count() == 1) {  // no export holds it: exported again at its next share
        evicted.push_back(std::move(it->second));
        it = shareable_.erase(it);
      } else {
        ++it;
      }
    }
  }
  int fd = -1;
  SYNCMEM_CU_TRY(driver().mem_export_to_shareable_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  std::shared_ptr<const exported_file> file;
  try {
    file = std::make_shared<const exported_file>(fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  std::shared_ptr<const int> named{file, &file->fd};
  shareable_.emplace(h, named);  // where it throws, `named` closes the descriptor
  return named;
}

void cuda_vmm::forget_shareable_fd(physical_handle h) noexcept {
  std::shared_ptr<const int> file;  // closed here unless an export still holds it
  std::lock_guard lock{shareable_mutex_};
  if (const auto it = shareable_.find(h); it != shareable_.end()) {
    file = std::move(it->second);
    shareable_.erase(it);
  }
}

void cuda_vmm::release(int, physical_handle h, std::size_t) noexcept {
  forget_shareable_fd(h);  // first: the driver may give a new allocation the same handle
  const CUresult status = driver().mem_release(h);
  if (status != CUDA_SUCCESS && status != CUDA_ERROR_DEINITIALIZED) {
    logger().error("cuMemRelease failed: {}", static_cast<int>(status));
  }
}

void cuda_vmm::map(int index, void* p, std::size_t bytes, physical_handle h) {
  const auto address = reinterpret_cast<CUdeviceptr>(p);
  SYNCMEM_CU_TRY(driver().mem_map(address, bytes, 0, h, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = index;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult status = driver().mem_set_access(address, bytes, &access, 1);
  if (status != CUDA_SUCCESS) {
    driver().mem_unmap(address, bytes);
    throw_driver_error(status, "cuMemSetAccess", __FILE__, __LINE__);
  }
  mappings_.mapped(p, bytes, h);
}

// One access change for the whole stretch: cuMemSetAccess costs about as
// much for many pages as for one.
void cuda_vmm::map_pages(int index, void* p, std::size_t page, const physical_handle* handles, std::size_t count) {
  const auto address = reinterpret_cast<CUdeviceptr>(p);
  std::size_t mapped = 0;
  auto undo = [&] {
    for (std::size_t i = 0; i < mapped; ++i) driver().mem_unmap(address + i * page, page);
  };
  for (; mapped < count; ++mapped) {
    const CUresult status = driver().mem_map(address + mapped * page, page, 0, handles[mapped], 0);
    if (status != CUDA_SUCCESS) {
      undo();
      throw_driver_error(status, "cuMemMap", __FILE__, __LINE__);
    }
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = index;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult status = driver().mem_set_access(address, page * count, &access, 1);
  if (status != CUDA_SUCCESS) {
    undo();
    throw_driver_error(status, "cuMemSetAccess", __FILE__, __LINE__);
  }
  for (std::size_t i = 0; i < count; ++i) {
    mappings_.mapped(reinterpret_cast<void*>(address + i * page), page, handles[i]);  // NOLINT
  }
}

void cuda_vmm::unmap(int, void* p, std::size_t bytes) noexcept {
  try {
    mappings_.unmapped(p, bytes);
  } catch (...) {  // NOLINT(bugprone-empty-catch): only the ipc capability reads the mappings
  }
  const CUresult status = driver().mem_unmap(reinterpret_cast<CUdeviceptr>(p), bytes);
  if (status != CUDA_SUCCESS && status != CUDA_ERROR_DEINITIALIZED) {
    logger().error("cuMemUnmap failed: {}", static_cast<int>(status));
  }
}

}  // namespace syncmem::detail::cuda
