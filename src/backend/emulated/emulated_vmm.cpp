#include "backend/emulated/emulated_vmm.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "backend/emulated/emulated_backend.hpp"
#include "core/ignored_failure.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::emulated {
namespace {
constexpr std::size_t vmm_page = std::size_t{2} << 20;
}  // namespace

std::size_t emulated_vmm::granularity(int index) {
  (void)backend_.device(index);
  return vmm_page;
}

void* emulated_vmm::reserve(int index, std::size_t bytes) {
  (void)backend_.device(index);
  SYNCMEM_EXPECTS(
      bytes > 0 && bytes % vmm_page == 0,
      fmt::format("vmm_reserve: {} bytes is not a positive multiple of the granularity {}", bytes, vmm_page));
  void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    SYNCMEM_SYSTEM_FAIL(errno, fmt::format("vmm_reserve: cannot reserve {} bytes of address space", bytes));
  backend_.add_allocation(p, {bytes, memory_kind::device, index});
  mappings_.reserved(p, bytes);
  return p;
}

void emulated_vmm::free_address(int index, void* p, std::size_t bytes) noexcept {
  (void)index;
  backend_.remove_allocation(p);
  ::munmap(p, bytes);
  mappings_.freed(p);
}

physical_handle emulated_vmm::create(int index, std::size_t bytes) {
  auto& d = backend_.device(index);
  SYNCMEM_EXPECTS(
      bytes > 0 && bytes % vmm_page == 0,
      fmt::format("vmm_create: {} bytes is not a positive multiple of the granularity {}", bytes, vmm_page));
  if (!backend_.reserve_capacity(d, bytes)) return 0;
  const int fd = ::memfd_create("syncmem-emulated", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    d.used.fetch_sub(bytes);
    // Lack of memory is an out-of-memory the caller reports; anything else (no file descriptors left) is not.
    if (error == ENOMEM || error == ENOSPC) return 0;
    SYNCMEM_SYSTEM_FAIL(error, fmt::format("vmm_create: cannot make a file of {} bytes to back the memory", bytes));
  }
  struct stat st {};
  (void)::fstat(fd, &st);
  std::lock_guard lock{physical_mutex_};
  const physical_handle handle = next_handle_++;
  physical_.emplace(handle, physical_block{fd, index, bytes, true, st.st_ino, st.st_dev});
  return handle;
}

void emulated_vmm::release(int index, physical_handle h, std::size_t) noexcept {
  std::lock_guard lock{physical_mutex_};
  auto it = physical_.find(h);
  if (it == physical_.end()) return;
  ::close(it->second.fd);
  backend_.device(index).used.fetch_sub(it->second.size);
  physical_.erase(it);
}

void emulated_vmm::map(int index, void* p, std::size_t bytes, physical_handle h) {
  (void)index;
  physical_block* block = nullptr;
  {
    std::lock_guard lock{physical_mutex_};
    auto it = physical_.find(h);
    SYNCMEM_EXPECTS(it != physical_.end(), "vmm_map: unknown physical handle");
    block = &it->second;
  }
  SYNCMEM_EXPECTS(bytes == block->size, "vmm_map: the size must be that of the physical allocation");
  void* q = ::mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, block->fd, 0);
  if (q != p) SYNCMEM_SYSTEM_FAIL(errno, fmt::format("vmm_map: mmap at {} failed", p));
  if (block->fresh) {
    if (backend_.poison()) std::memset(p, poison_byte, bytes);
    block->fresh = false;
  }
  mappings_.mapped(p, bytes, h);
}

void emulated_vmm::unmap(int index, void* p, std::size_t bytes) noexcept {
  // Work in flight may still use the pages.
  detail::ignore_failure("synchronizing an emulated device before an unmap", [&] { backend_.wait_for_device(index); });
  ::mmap(p, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  detail::ignore_failure("forgetting an emulated mapping", [&] { mappings_.unmapped(p, bytes); });
}

std::vector<emulated_vmm::mapped_piece> emulated_vmm::pieces(const void* p, std::size_t bytes) {
  const auto mapped = mappings_.pieces(p, bytes);
  std::vector<mapped_piece> out;
  std::lock_guard lock{physical_mutex_};
  for (const auto& m : mapped) {
    const physical_block& b = physical_.at(m.handle);
    out.push_back({m.address, m.size, b.fd, b.inode, b.file_device});
  }
  return out;
}

}  // namespace syncmem::detail::emulated
