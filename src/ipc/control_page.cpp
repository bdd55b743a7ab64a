#include "ipc/control_page.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include <fmt/format.h>

#include "ipc/fd_broker.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::ipc {
namespace {

constexpr std::size_t page_size = 4096;
constexpr std::uint64_t control_magic = 0x53594e434d495043;  // "SYNCMIPC"
static_assert(sizeof(control_data) <= page_size);

control_data* map(int fd, std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<control_data*>(p);
}

}  // namespace

std::shared_ptr<control_page> control_page::create(std::uint64_t nonce, std::span<const std::byte> extra) {
  const std::size_t bytes = page_size + (extra.size() + page_size - 1) / page_size * page_size;
  const int fd = ::memfd_create("syncmem-ipc-control", MFD_CLOEXEC);
  if (fd < 0) SYNCMEM_SYSTEM_FAIL(errno, "ipc export: memfd_create for the control page");
  struct stat st {};
  control_data* data = nullptr;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 || ::fstat(fd, &st) != 0 || (data = map(fd, bytes)) == nullptr) {
    const int error = errno;
    ::close(fd);
    SYNCMEM_SYSTEM_FAIL(error, "ipc export: making the control page");
  }
  auto* d = new (data) control_data{control_magic, nonce, {}, {}, {}, extra.size()};
  if (!extra.empty()) std::memcpy(reinterpret_cast<std::byte*>(data) + page_size, extra.data(), extra.size());
  d->state.store(static_cast<std::uint32_t>(export_state::exported), std::memory_order_release);
  return std::shared_ptr<control_page>{new control_page{d, bytes, fd, st.st_ino, st.st_dev}};
}

std::span<const std::byte> control_page::extra() const noexcept {
  return {reinterpret_cast<const std::byte*>(data_) + page_size, static_cast<std::size_t>(data_->extra_size)};
}

std::shared_ptr<control_page> control_page::open(pid_t exporter, int fd, std::uint64_t inode, std::uint64_t device,
                                                 std::uint64_t nonce) {
  const std::string path = fmt::format("/proc/{}/fd/{}", exporter, fd);
  const int own = exporters_fd(exporter, fd, [&] { return open_proc_fd(exporter, fd); });
  if (own < 0) {
    SYNCMEM_FAIL(
        fmt::format("ipc import: process {} no longer shares this memory (it exited, or the export was "
                    "released): {} ({})",
                    exporter, path, std::strerror(errno)));
  }
  struct stat st {};
  control_data* data = nullptr;
  const bool same_file = ::fstat(own, &st) == 0 && st.st_ino == inode && st.st_dev == device &&
                         static_cast<std::size_t>(st.st_size) >= page_size;
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (same_file) data = map(own, bytes);
  ::close(own);  // the mapping keeps the file
  if (!same_file || data == nullptr) {
    SYNCMEM_FAIL(
        fmt::format("ipc import: process {} no longer shares this memory (the handle is stale: {} is "
                    "another file now)",
                    exporter, path));
  }
  if (data->magic != control_magic || data->nonce != nonce || data->extra_size > bytes - page_size) {
    ::munmap(data, bytes);
    SYNCMEM_FAIL("ipc import: the handle does not match the export it names (forged or damaged)");
  }
  return std::shared_ptr<control_page>{new control_page{data, bytes, -1, inode, device}};
}

control_page::~control_page() {
  ::munmap(data_, mapped_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace syncmem::detail::ipc
