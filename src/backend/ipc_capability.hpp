#pragma once

// Sharing device memory with other processes (CUDA IPC), a capability a
// backend may offer: see backend::ipc(). src/ipc builds the public
// syncmem::ipc on it, with the parts every backend shares (the handle, the
// control page that counts importers, keeping the memory alive).

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/handles.hpp"

namespace syncmem::detail {

// What a backend writes to describe shared memory or an event, and only it
// reads (cudaIpcMemHandle_t and cudaIpcEventHandle_t are 64 bytes each).
using ipc_bytes = std::array<std::byte, 64>;

// The memory that holds an exported range, and how to open it: `memory`,
// and for memory made of many pieces (pages of the growable range) `extra`,
// a longer description that goes in the control page.
struct ipc_export {
  void* base = nullptr;
  std::size_t size = 0;
  ipc_bytes memory{};
  std::vector<std::byte> extra;
  // Descriptors of this process the description names, which the importer takes copies of.
  std::vector<int> named;
  // What keeps them open while the export is held, where the backend would
  // otherwise close them sooner (CUDA's exported pages); let go with the export.
  std::vector<std::shared_ptr<const void>> held;
};

// A word of memory shared by the exporter and its importer (in the control
// page), which a backend may use to signal that the exporter's work is done.
struct ipc_shared_word {
  std::atomic<std::uint32_t> signalled{0};
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "a word shared between processes must be lock-free");

class ipc_capability {
 public:
  ipc_capability() = default;
  ipc_capability(const ipc_capability&) = delete;
  ipc_capability& operator=(const ipc_capability&) = delete;
  virtual ~ipc_capability() = default;

  // The memory of device `index` that holds [p, p + bytes), described for
  // another process (cudaIpcGetMemHandle of its allocation). Throws
  // syncmem::logic_error naming why when it is not memory it can share.
  [[nodiscard]] virtual ipc_export export_memory(int index, const void* p, std::size_t bytes) = 0;
  // Maps the memory `memory` and `extra` describe, of `size` bytes, exported
  // by process `exporter`, into this process (cudaIpcOpenMemHandle). Throws
  // syncmem::logic_error with the reason when it cannot (the exporter is
  // gone, the description is forged or stale).
  [[nodiscard]] virtual void* open_memory(int index, const ipc_bytes& memory, std::span<const std::byte> extra,
                                          std::size_t size, pid_t exporter) = 0;
  virtual void close_memory(int index, void* base, std::size_t size) noexcept = 0;

  // Ordering. record_signal marks the point of `s` after the work enqueued so
  // far, described in `event` for the importer (an interprocess event) or in
  // `word`; what it returns is released by release_signal once no importer
  // can still wait on it. wait_signal makes work enqueued on `s` afterwards
  // wait for that point; a wait whose exporter exits before the point is
  // reached fails the stream instead of waiting forever.
  // The word stays mapped while the stream may still reach the point.
  [[nodiscard]] virtual event_handle record_signal(int index, stream_handle s, std::shared_ptr<ipc_shared_word> word,
                                                   ipc_bytes& event) = 0;
  virtual void release_signal(int index, event_handle e) noexcept = 0;
  virtual void wait_signal(int index, stream_handle s, const ipc_bytes& event, std::shared_ptr<ipc_shared_word> word,
                           pid_t exporter) = 0;
};

}  // namespace syncmem::detail
