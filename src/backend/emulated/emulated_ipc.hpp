#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/ipc_capability.hpp"

namespace syncmem::detail::emulated {

class emulated_backend;

// Sharing emulated device memory with other processes. Device allocations of
// 64 KiB and more are memfd files mapped shared (every caching segment is
// one), and so is each page of the growable range (emulated_vmm); the
// importer maps the same files through /proc/<exporter>/fd/<fd>, the pages
// of a range side by side as the exporter has them.
// Smaller allocations are heap memory and cannot be shared, nor can a large
// one made when no file could be (the files in use reached a quarter of the
// process's descriptors). The exporter
// signals through the control page's shared word, which the importer's
// stream polls.
class emulated_ipc final : public ipc_capability {
 public:
  explicit emulated_ipc(emulated_backend& backend) noexcept : backend_{backend} {}

  [[nodiscard]] ipc_export export_memory(int index, const void* p, std::size_t bytes) override;
  [[nodiscard]] void* open_memory(int index, const ipc_bytes& memory, std::span<const std::byte> extra,
                                  std::size_t size, pid_t exporter) override;
  void close_memory(int index, void* base, std::size_t size) noexcept override;
  [[nodiscard]] event_handle record_signal(int index, stream_handle s, std::shared_ptr<ipc_shared_word> word,
                                           ipc_bytes& event) override;
  void release_signal(int, event_handle) noexcept override {}
  void wait_signal(int index, stream_handle s, const ipc_bytes& event, std::shared_ptr<ipc_shared_word> word,
                   pid_t exporter) override;

  // Device memory of `size` bytes (a multiple of the page) in a file of its
  // own, for the backend's allocate; nullptr when no file can be made.
  [[nodiscard]] void* allocate_shareable(std::size_t size) noexcept;
  // Frees what allocate_shareable made (importers keep the file's pages);
  // false, doing nothing, for other memory. A mapping never exported is kept
  // for the next allocation of its size, up to idle_limit bytes in all: a new
  // file costs system calls and a fault per page, which heap memory reused
  // by the allocator does not.
  bool free_shareable(void* p, std::size_t size) noexcept;

 private:
  static constexpr std::size_t idle_limit = std::size_t{256} << 20;

  struct shared_file {
    int fd;
    std::size_t size;
    std::uint64_t inode;
    std::uint64_t device;
    bool exported = false;  // an importer may map it: never reused
  };

  emulated_backend& backend_;
  std::mutex mutex_;
  std::unordered_map<std::uintptr_t, shared_file> files_;                             // by the allocation's base
  std::unordered_map<std::size_t, std::vector<std::pair<void*, shared_file>>> idle_;  // by size
  std::size_t idle_bytes_ = 0;
  std::size_t idle_files_ = 0;
};

}  // namespace syncmem::detail::emulated
