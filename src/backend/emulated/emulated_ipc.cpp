#include "backend/emulated/emulated_ipc.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "backend/emulated/emulated_backend.hpp"
#include "core/process.hpp"
#include "ipc/fd_broker.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::emulated {
namespace {

constexpr std::uint32_t memory_magic = 0x534d454d;  // "SMEM": one file
constexpr std::uint32_t pieces_magic = 0x534d4750;  // "SMGP": pieces of the growable range, in `extra`

// What export_memory writes into ipc_bytes: one file, or how many pieces.
struct memory_description {
  std::uint32_t magic;
  std::int32_t fd;
  std::uint64_t inode;
  std::uint64_t device;
  std::uint64_t size;
};
static_assert(sizeof(memory_description) <= sizeof(ipc_bytes));

// One piece of the growable range, at `offset` from the first.
struct piece_description {
  std::uint64_t offset;
  std::uint64_t size;
  std::uint64_t inode;
  std::uint64_t device;
  std::int32_t fd;
  std::uint32_t unused;
};

// `own`, the copy of the exporter's file `fd` (-1 with errno set where it
// was not given), if it still is the file the handle names.
int checked_exporters_file(int own, pid_t exporter, int fd, std::uint64_t inode, std::uint64_t device,
                           std::uint64_t size) {
  const int error = errno;
  const std::string path = fmt::format("/proc/{}/fd/{}", exporter, fd);
  if (own < 0) {
    SYNCMEM_FAIL(
        fmt::format("ipc import: process {} no longer shares this memory (it exited or freed the "
                    "allocation): {} ({})",
                    exporter, path, std::strerror(error)));
  }
  struct stat st {};
  if (::fstat(own, &st) != 0 || st.st_ino != inode || st.st_dev != device ||
      static_cast<std::uint64_t>(st.st_size) < size) {
    ::close(own);
    SYNCMEM_FAIL(
        fmt::format("ipc import: process {} no longer shares this memory (the handle is stale: {} is "
                    "another file now)",
                    exporter, path));
  }
  return own;
}

}  // namespace

void* emulated_ipc::allocate_shareable(std::size_t size) noexcept {
  // At most a quarter of the process's file descriptors, leaving the rest to
  // the program (and to the virtual memory API's files).
  static const std::size_t most_files = [] {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::size_t{256};
    return static_cast<std::size_t>(limit.rlim_cur / 4);
  }();
  {
    std::lock_guard lock{mutex_};
    if (auto it = idle_.find(size); it != idle_.end() && !it->second.empty()) {
      auto [p, file] = it->second.back();
      try {
        files_.emplace(reinterpret_cast<std::uintptr_t>(p), file);
      } catch (...) {
        return nullptr;
      }
      it->second.pop_back();
      idle_bytes_ -= size;
      --idle_files_;
      return p;
    }
    if (files_.size() + idle_files_ >= most_files) return nullptr;
  }
  const int fd = ::memfd_create("syncmem-emulated", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* p = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(size)) == 0 && ::fstat(fd, &st) == 0) {
    p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    ::close(fd);
    return nullptr;
  }
  try {
    std::lock_guard lock{mutex_};
    files_.emplace(reinterpret_cast<std::uintptr_t>(p), shared_file{fd, size, st.st_ino, st.st_dev});
  } catch (...) {
    ::munmap(p, size);
    ::close(fd);
    return nullptr;
  }
  return p;
}

bool emulated_ipc::free_shareable(void* p, std::size_t size) noexcept {
  int fd = -1;
  {
    std::lock_guard lock{mutex_};
    auto it = files_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == files_.end()) return false;
    const shared_file file = it->second;
    files_.erase(it);
    if (!file.exported && idle_bytes_ + size <= idle_limit) {
      try {
        idle_[size].emplace_back(p, file);
        idle_bytes_ += size;
        ++idle_files_;
        return true;
      } catch (...) {  // NOLINT(bugprone-empty-catch): no room to keep it; it is freed below
      }
    }
    fd = file.fd;
  }
  ::munmap(p, size);
  ::close(fd);
  return true;
}

ipc_export emulated_ipc::export_memory(int index, const void* p, std::size_t bytes) {
  const auto found = backend_.allocation_containing(p);
  SYNCMEM_EXPECTS(found && found->second.kind == memory_kind::device && found->second.device == index,
                  fmt::format("ipc export: {} is not memory allocated on emulated:{}", p, index));
  auto* const base = reinterpret_cast<void*>(found->first);  // NOLINT(performance-no-int-to-ptr)
  const std::size_t size = found->second.size;
  std::unique_lock lock{mutex_};
  if (const auto it = files_.find(found->first); it != files_.end()) {
    it->second.exported = true;
    ipc_export result{base, size, {}, {}, {it->second.fd}, {}};
    const memory_description d{memory_magic, it->second.fd, it->second.inode, it->second.device, size};
    std::memcpy(result.memory.data(), &d, sizeof d);
    return result;
  }
  lock.unlock();
  if (backend_.vmm().reserved(p)) {
    // A range of the virtual memory API, whose pages are files.
    const auto pieces = backend_.vmm().pieces(p, bytes);
    {
      ipc_export result;
      result.base = reinterpret_cast<void*>(pieces.front().address);  // NOLINT(performance-no-int-to-ptr)
      result.size = pieces.back().address + pieces.back().size - pieces.front().address;
      const memory_description d{pieces_magic, static_cast<std::int32_t>(pieces.size()), 0, 0, result.size};
      std::memcpy(result.memory.data(), &d, sizeof d);
      result.extra.resize(pieces.size() * sizeof(piece_description));
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        const piece_description pd{pieces[i].address - pieces.front().address,
                                   pieces[i].size,
                                   pieces[i].inode,
                                   pieces[i].device,
                                   pieces[i].fd,
                                   0};
        std::memcpy(result.extra.data() + i * sizeof pd, &pd, sizeof pd);
        result.named.push_back(pieces[i].fd);
      }
      return result;
    }
  }
  SYNCMEM_FAIL(size < page_aligned_from
                   ? fmt::format("ipc export: emulated devices share allocations of 64 KiB and more; the one "
                                 "holding {} has {} bytes",
                                 p, size)
                   : fmt::format("ipc export: the allocation holding {} could not be made shareable when it was "
                                 "made (too many files were in use)",
                                 p));
}

void* emulated_ipc::open_memory(int index, const ipc_bytes& memory, std::span<const std::byte> extra, std::size_t size,
                                pid_t exporter) {
  memory_description d{};
  std::memcpy(&d, memory.data(), sizeof d);
  SYNCMEM_EXPECTS((d.magic == memory_magic || d.magic == pieces_magic) && d.size == size && d.fd >= 0,
                  "ipc import: the handle does not describe emulated device memory (forged or damaged)");
  void* p = nullptr;
  if (d.magic == memory_magic) {
    const int fd =
        checked_exporters_file(ipc::exporters_fd(exporter, d.fd, [&] { return ipc::open_proc_fd(exporter, d.fd); }),
                               exporter, d.fd, d.inode, d.device, d.size);
    p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);  // the mapping keeps the file
    if (p == MAP_FAILED) SYNCMEM_SYSTEM_FAIL(error, fmt::format("ipc import: mapping {} bytes", size));
  } else {
    const auto count = static_cast<std::size_t>(d.fd);
    SYNCMEM_EXPECTS(extra.size() == count * sizeof(piece_description),
                    "ipc import: the handle's pieces do not match its description (forged or damaged)");
    // An address range for the whole, each piece's file mapped at its place in it.
    p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) SYNCMEM_SYSTEM_FAIL(errno, fmt::format("ipc import: reserving {} bytes", size));
    try {
      std::vector<piece_description> described(count);
      std::vector<int> wanted(count);
      for (std::size_t i = 0; i < count; ++i) {
        std::memcpy(&described[i], extra.data() + i * sizeof(piece_description), sizeof(piece_description));
        SYNCMEM_EXPECTS(described[i].offset + described[i].size <= size,
                        "ipc import: a piece lies outside the memory (forged or damaged)");
        wanted[i] = described[i].fd;
      }
      for (std::size_t first = 0; first < count; first += ipc::fds_per_request) {
        const std::size_t n = std::min(ipc::fds_per_request, count - first);
        ipc::copied_fds fds = ipc::exporters_fds(exporter, std::span{wanted}.subspan(first, n),
                                                 [&](int fd) { return ipc::open_proc_fd(exporter, fd); });
        for (std::size_t i = 0; i < n; ++i) {
          const piece_description& pd = described[first + i];
          const int fd = checked_exporters_file(fds.take(i), exporter, pd.fd, pd.inode, pd.device, pd.size);
          void* at = static_cast<std::byte*>(p) + pd.offset;
          void* q = ::mmap(at, pd.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
          const int error = errno;
          ::close(fd);
          if (q != at) SYNCMEM_SYSTEM_FAIL(error, fmt::format("ipc import: mapping a piece of {} bytes", pd.size));
        }
      }
    } catch (...) {
      ::munmap(p, size);
      throw;
    }
  }
  backend_.add_allocation(p, {size, memory_kind::device, index});
  return p;
}

void emulated_ipc::close_memory(int, void* base, std::size_t size) noexcept {
  (void)backend_.remove_allocation(base);
  ::munmap(base, size);
}

event_handle emulated_ipc::record_signal(int index, stream_handle s, std::shared_ptr<ipc_shared_word> word,
                                         ipc_bytes&) {
  backend_.to_stream(s, index).enqueue_uncaptured(
      [word = std::move(word)] { word->signalled.store(1, std::memory_order_release); });
  return event_handle{};
}

void emulated_ipc::wait_signal(int index, stream_handle s, const ipc_bytes&, std::shared_ptr<ipc_shared_word> word,
                               pid_t exporter) {
  backend_.to_stream(s, index).enqueue_uncaptured([word = std::move(word), exporter] {
    auto pause = std::chrono::microseconds{10};
    while (word->signalled.load(std::memory_order_acquire) == 0) {
      if (!process_alive(exporter) && word->signalled.load(std::memory_order_acquire) == 0) {
        SYNCMEM_FAIL(
            fmt::format("ipc import: process {} exited before its writes to the shared memory were done", exporter));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds{1000});
    }
  });
}

}  // namespace syncmem::detail::emulated
