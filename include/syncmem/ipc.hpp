#pragma once

/// @file ipc.hpp
/// @brief Device memory shared between processes (CUDA IPC). The exporter
/// turns a range of device memory into a memory_handle, plain bytes sent over
/// any channel; the importer opens it once, on the same device, and gets the
/// same memory, not a copy. Work the exporter enqueued on its stream before
/// exporting happens before the importer's work on its stream. The exporter
/// holds the memory (through `owner`) until the importer closes it or exits.
/// How it works, and what each backend can share, is in docs/ipc.md.
///
/// @code
/// // exporter
/// auto buffer = std::make_shared<syncmem::device_buffer>(bytes, s);
/// /* ...write it on s... */
/// syncmem::ipc::memory_handle h = syncmem::ipc::export_memory(buffer->data(), bytes, s, buffer);
/// send(h.to_hex());  // any channel
///
/// // importer, another process
/// auto memory = syncmem::ipc::import_memory(syncmem::ipc::memory_handle::from_hex(receive()), s);
/// /* ...use memory.data() on s... */
/// memory.close();  // the exporter may reuse it now
/// @endcode

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "syncmem/device_id.hpp"
#include "syncmem/stream.hpp"

namespace syncmem {
class synced_memory;
}

namespace syncmem::ipc {

namespace detail {
struct import_state;
}

/// @brief What an importer needs to open exported device memory: which
/// process exported it, on which device, which range. Plain bytes (or hex),
/// to send over a pipe, a socket or a pickle. Each handle is imported at most
/// once.
class memory_handle {
 public:
  static constexpr std::size_t size_in_bytes = 256;

  /// @brief An empty handle, which imports nothing.
  memory_handle() = default;
  /// @brief The handle in `bytes`; throws syncmem::logic_error when they are
  /// not a syncmem IPC handle (the wrong size, magic or version).
  [[nodiscard]] static memory_handle from_bytes(std::span<const std::byte> bytes);
  /// @brief The same from the text to_hex() wrote.
  [[nodiscard]] static memory_handle from_hex(std::string_view hex);

  [[nodiscard]] std::span<const std::byte, size_in_bytes> bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::string to_hex() const;
  /// @brief The device of the memory; throws for an empty handle.
  [[nodiscard]] device_id device() const;
  /// @brief The bytes shared.
  [[nodiscard]] std::size_t size() const;
  /// @brief The exporting process.
  [[nodiscard]] int exporter() const;
  [[nodiscard]] bool empty() const noexcept;

 private:
  friend struct handle_access;
  std::array<std::byte, size_in_bytes> bytes_{};
};

/// @brief Shares `bytes` bytes of device memory at `p` (allocated by a
/// syncmem resource, or by the backend directly) with one other process.
/// Work enqueued on `s` before the call happens before the importer's use of
/// the memory. `owner` (the buffer, tensor storage or other object that keeps
/// the memory alive) is held until the importer closes the memory or exits;
/// pass none only where the caller itself keeps the memory until then.
/// Throws syncmem::logic_error when the memory is not the stream's device's,
/// and syncmem::unsupported_error where the device cannot share memory.
[[nodiscard]] memory_handle export_memory(const void* p, std::size_t bytes, stream_view s,
                                          std::shared_ptr<const void> owner);

/// @brief Device memory another process exported, mapped into this one until
/// close() or destruction.
class imported_memory {
 public:
  imported_memory() noexcept = default;
  imported_memory(imported_memory&&) noexcept = default;
  imported_memory& operator=(imported_memory&& other) noexcept;
  imported_memory(const imported_memory&) = delete;
  imported_memory& operator=(const imported_memory&) = delete;
  ~imported_memory() { close(); }

  [[nodiscard]] void* data() const noexcept;
  [[nodiscard]] std::size_t size() const noexcept;
  /// @brief The device of the memory; throws syncmem::logic_error once closed.
  [[nodiscard]] device_id device() const;
  [[nodiscard]] bool is_open() const noexcept { return state_ != nullptr; }
  /// @brief Waits for the stream it was imported on, unmaps the memory and
  /// tells the exporter, which may reuse it from then on. Work on other
  /// streams that uses the memory must be done before.
  void close() noexcept;

 private:
  friend imported_memory import_memory(const memory_handle& h, stream_view s);
  explicit imported_memory(std::shared_ptr<detail::import_state> state) noexcept : state_{std::move(state)} {}
  std::shared_ptr<detail::import_state> state_;
};

/// @brief Opens the memory `h` shares, on `s`'s device: work enqueued on `s`
/// afterwards waits for the exporter's writes. Throws syncmem::logic_error,
/// saying which, for an empty, forged or damaged handle, a handle of another
/// device, one imported already, and one whose exporter has exited or
/// released it.
[[nodiscard]] imported_memory import_memory(const memory_handle& h, stream_view s);

/// @brief Shares the device side of `memory` (made current on `s` first) for
/// reading and writing, holding the buffer until the importer lets go. The
/// host side is not shared.
[[nodiscard]] memory_handle export_synced(const std::shared_ptr<synced_memory>& memory, stream_view s);
/// @brief A synced_memory whose device side is the memory `h` shares,
/// current on the device; its host side is its own, made on first use.
[[nodiscard]] std::shared_ptr<synced_memory> import_synced(const memory_handle& h, stream_view s);

/// @brief Gives back the memory of exports whose importer closed them or
/// exited, and returns how many. Every export runs it first, and so does an
/// allocation of a caching_resource that would fail for lack of memory;
/// call it to get memory back sooner.
std::size_t collect();
/// @brief How many exports this process holds for importers.
[[nodiscard]] std::size_t exports_held();

}  // namespace syncmem::ipc
