#include "backend/cuda/cuda_ipc.hpp"

#include <cuda_runtime_api.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/cuda_handles.hpp"
#include "backend/cuda/cuda_vmm.hpp"
#include "backend/cuda/driver_api.hpp"
#include "core/log.hpp"
#include "ipc/fd_broker.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::cuda {

static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(ipc_bytes));
static_assert(sizeof(cudaIpcEventHandle_t) <= sizeof(ipc_bytes));

namespace {

constexpr std::uint32_t pages_magic = 0x43554750;  // "CUGP": pages of the growable range, in `extra`

// What `memory` holds for pages (a cudaIpcMemHandle_t otherwise).
struct pages_description {
  std::uint32_t magic;
  std::uint32_t count;
  std::uint64_t size;
};
static_assert(sizeof(pages_description) <= sizeof(ipc_bytes));

// One page, at `offset` from the first, and the exporter's descriptor of it.
struct page_description {
  std::uint64_t offset;
  std::uint64_t size;
  std::int32_t fd;
  std::uint32_t unused;
};

bool describes_pages(const ipc_bytes& memory) {
  pages_description d{};
  std::memcpy(&d, memory.data(), sizeof d);
  return d.magic == pages_magic;
}

}  // namespace

ipc_export cuda_ipc::export_pages(int index, const void* p, std::size_t bytes) {
  const auto& api = driver();
  SYNCMEM_EXPECTS(api.mem_export_to_shareable_handle != nullptr && vmm_.exportable(index),
                  fmt::format("ipc export: the pages of cuda:{}'s growable range cannot be shared (the driver made "
                              "them without POSIX file descriptors); set SYNCMEM_ALLOC_CONF=expandable:0 to share "
                              "plain segments",
                              index));
  const auto pieces = vmm_.mappings().pieces(p, bytes);
  ipc_export result;
  result.base = reinterpret_cast<void*>(pieces.front().address);  // NOLINT(performance-no-int-to-ptr)
  result.size = pieces.back().address + pieces.back().size - pieces.front().address;
  const pages_description d{pages_magic, static_cast<std::uint32_t>(pieces.size()), result.size};
  std::memcpy(result.memory.data(), &d, sizeof d);
  result.extra.resize(pieces.size() * sizeof(page_description));
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    // The page's descriptor from its first share on: the export holds it open, not a new one of its own.
    std::shared_ptr<const int> fd = vmm_.shareable_fd(pieces[i].handle);
    const page_description pd{pieces[i].address - pieces.front().address, pieces[i].size, *fd, 0};
    std::memcpy(result.extra.data() + i * sizeof pd, &pd, sizeof pd);
    result.named.push_back(*fd);
    result.held.push_back(std::move(fd));
  }
  return result;
}

void* cuda_ipc::open_pages(int index, std::span<const std::byte> extra, std::size_t count, std::size_t size,
                           pid_t exporter) {
  const auto& api = driver();
  SYNCMEM_EXPECTS(api.loaded && api.mem_import_from_shareable_handle != nullptr,
                  "ipc import: the CUDA driver cannot import pages of another process");
  SYNCMEM_EXPECTS(extra.size() == count * sizeof(page_description),
                  "ipc import: the handle's pages do not match its description (forged or damaged)");
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, exporter, 0));
  if (pidfd < 0) {
    SYNCMEM_FAIL(fmt::format("ipc import: process {} no longer shares this memory (pidfd_open: {})", exporter,
                             std::strerror(errno)));
  }
  imported_pages pages{size, {}};
  CUdeviceptr base = 0;
  auto undo = [&] {
    if (base != 0) {
      (void)api.mem_unmap(base, size);
      (void)api.mem_address_free(base, size);
    }
    for (const auto h : pages.handles) (void)api.mem_release(h);
    ::close(pidfd);
  };
  try {
    SYNCMEM_CU_TRY(api.mem_address_reserve(&base, size, 0, 0, 0));
    std::vector<page_description> described(count);
    std::vector<int> wanted(count);
    for (std::size_t i = 0; i < count; ++i) {
      std::memcpy(&described[i], extra.data() + i * sizeof(page_description), sizeof(page_description));
      SYNCMEM_EXPECTS(described[i].offset + described[i].size <= size,
                      "ipc import: a page lies outside the memory (forged or damaged)");
      wanted[i] = described[i].fd;
    }
    pages.handles.reserve(count);
    for (std::size_t first = 0; first < count; first += ipc::fds_per_request) {
      // Copies of the exporter's descriptors: pidfd_getfd needs the right to trace the exporter (same user,
      // ptrace_scope); where it is refused, the exporter's broker gives a turn of them at once.
      const std::size_t n = std::min(ipc::fds_per_request, count - first);
      ipc::copied_fds fds = ipc::exporters_fds(exporter, std::span{wanted}.subspan(first, n), [&](int fd) {
        return static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));
      });
      for (std::size_t i = 0; i < n; ++i) {
        const page_description& pd = described[first + i];
        const int fd = fds.take(i);
        if (fd < 0) {
          SYNCMEM_FAIL(
              fmt::format("ipc import: cannot take descriptor {} of process {} ({}): pidfd_getfd was refused "
                          "and the exporter's descriptor broker did not give it",
                          pd.fd, exporter, std::strerror(errno)));
        }
        CUmemGenericAllocationHandle h = 0;
        const CUresult status = api.mem_import_from_shareable_handle(
            &h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        ::close(fd);
        SYNCMEM_CU_TRY(status);
        pages.handles.push_back(h);
        SYNCMEM_CU_TRY(api.mem_map(base + pd.offset, pd.size, 0, h, 0));
      }
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = index;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    SYNCMEM_CU_TRY(api.mem_set_access(base, size, &access, 1));
    std::lock_guard lock{mutex_};
    imported_.emplace(static_cast<std::uintptr_t>(base), std::move(pages));
  } catch (...) {
    undo();
    throw;
  }
  ::close(pidfd);
  return reinterpret_cast<void*>(base);  // NOLINT(performance-no-int-to-ptr)
}

ipc_export cuda_ipc::export_memory(int index, const void* p, std::size_t bytes) {
  if (vmm_.mappings().in_reserved(p)) return export_pages(index, p, bytes);
  const auto& api = driver();
  SYNCMEM_EXPECTS(api.loaded, "ipc export: the CUDA driver lacks the calls syncmem needs");
  CUdeviceptr base = 0;
  std::size_t size = 0;
  const auto address = reinterpret_cast<CUdeviceptr>(p);
  cudaIpcMemHandle_t handle{};
  cudaError_t status = cudaErrorInvalidValue;
  if (api.pointer_get_attribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, address) == CUDA_SUCCESS &&
      api.pointer_get_attribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, address) == CUDA_SUCCESS) {
    status = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base));  // NOLINT(performance-no-int-to-ptr)
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    SYNCMEM_FAIL(
        fmt::format("ipc export: CUDA cannot share the allocation holding {} on cuda:{} ({}): CUDA IPC "
                    "shares memory of cudaMalloc (the caching resource's plain segments), not of the "
                    "growable range or of cudaMallocAsync pools",
                    p, index, cudaGetErrorString(status)));
  }
  ipc_export result{reinterpret_cast<void*>(base), size, {}};  // NOLINT(performance-no-int-to-ptr)
  std::memcpy(result.memory.data(), &handle, sizeof handle);
  return result;
}

void* cuda_ipc::open_memory(int index, const ipc_bytes& memory, std::span<const std::byte> extra, std::size_t size,
                            pid_t exporter) {
  if (describes_pages(memory)) {
    pages_description d{};
    std::memcpy(&d, memory.data(), sizeof d);
    SYNCMEM_EXPECTS(d.size == size, "ipc import: the handle's size does not match its pages (forged or damaged)");
    return open_pages(index, extra, d.count, size, exporter);
  }
  cudaIpcMemHandle_t handle{};
  std::memcpy(&handle, memory.data(), sizeof handle);
  void* p = nullptr;
  const cudaError_t status = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    SYNCMEM_FAIL(
        fmt::format("ipc import: cannot open the memory process {} shared on cuda:{} ({}); the exporter "
                    "may have exited or freed it",
                    exporter, index, cudaGetErrorString(status)));
  }
  return p;
}

void cuda_ipc::close_memory(int, void* base, std::size_t) noexcept {
  imported_pages pages{};
  bool were_pages = false;
  {
    std::lock_guard lock{mutex_};
    if (auto it = imported_.find(reinterpret_cast<std::uintptr_t>(base)); it != imported_.end()) {
      pages = std::move(it->second);
      imported_.erase(it);
      were_pages = true;
    }
  }
  if (were_pages) {
    const auto& api = driver();
    const auto address = reinterpret_cast<CUdeviceptr>(base);
    (void)api.mem_unmap(address, pages.size);
    for (const auto h : pages.handles) (void)api.mem_release(h);
    (void)api.mem_address_free(address, pages.size);
    return;
  }
  const cudaError_t status = cudaIpcCloseMemHandle(base);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    logger().warn("cudaIpcCloseMemHandle({}) failed: {}", base, cudaGetErrorString(status));
  }
}

event_handle cuda_ipc::record_signal(int, stream_handle s, std::shared_ptr<ipc_shared_word>, ipc_bytes& event) {
  cudaEvent_t e = nullptr;
  SYNCMEM_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess));
  try {
    SYNCMEM_CUDA_TRY(cudaEventRecord(e, native(s)));
    cudaIpcEventHandle_t handle{};
    SYNCMEM_CUDA_TRY(cudaIpcGetEventHandle(&handle, e));
    std::memcpy(event.data(), &handle, sizeof handle);
  } catch (...) {
    (void)cudaEventDestroy(e);
    throw;
  }
  return handle_of(e);
}

void cuda_ipc::release_signal(int, event_handle e) noexcept { (void)cudaEventDestroy(native(e)); }

void cuda_ipc::wait_signal(int, stream_handle s, const ipc_bytes& event, std::shared_ptr<ipc_shared_word>, pid_t) {
  cudaIpcEventHandle_t handle{};
  std::memcpy(&handle, event.data(), sizeof handle);
  cudaEvent_t e = nullptr;
  SYNCMEM_CUDA_TRY(cudaIpcOpenEventHandle(&e, handle));
  const cudaError_t status = cudaStreamWaitEvent(native(s), e, 0);
  (void)cudaEventDestroy(e);  // the wait holds what it needs
  SYNCMEM_CUDA_TRY(status);
}

}  // namespace syncmem::detail::cuda
