#pragma once

/// @file mr/registered_memory.hpp
/// @brief Pinning a range of memory the caller already owns (cudaHostRegister), for a scope.

#include <cstddef>

#include "syncmem/device_id.hpp"

namespace syncmem::mr {

/// @brief Flags of cudaHostRegister.
struct register_flags {
  bool portable = true;    ///< pinned for every CUDA context, not only the current one
  bool mapped = false;     ///< mapped into the device address space
  bool read_only = false;  ///< the device only reads it (cudaHostRegisterReadOnly)
};

/// @brief Page-locks `[data, data + size)`, host memory the caller owns
/// (malloc, new, a std::vector's storage), for the lifetime of the object:
/// cudaHostRegister on construction, cudaHostUnregister on destruction. For
/// an emulated backend the range is entered into its registry instead. While
/// registered, get_pointer_attributes says pinned and the transfer engine
/// copies the range by DMA, with no staging.
///
/// Registering costs about as much as cudaHostAlloc (0.1 ms for 4 KiB, 50 ms
/// for 1 GiB): worth it for memory that is transferred many times. The memory
/// must outlive the registration. Unregistering waits for the device, like
/// cudaHostUnregister.
///
/// Move-only; a default-constructed or moved-from object registers nothing.
/// Thread safety: an object belongs to one thread at a time; registering
/// different ranges from several threads is safe.
class registered_memory {
 public:
  registered_memory() noexcept = default;
  /// @brief Registers `[data, data + size)` with the backend `backend`.
  /// @throws syncmem::logic_error when `data` is null or `size` is 0, or when
  ///   the range overlaps memory that is already pinned, registered or device
  ///   memory (the message names the range and what it found)
  /// @throws syncmem::unsupported_error when `backend` has no devices
  /// @throws syncmem::cuda_error when cudaHostRegister fails otherwise
  registered_memory(void* data, std::size_t size, device_kind backend, register_flags flags = {});
  ~registered_memory();

  registered_memory(const registered_memory&) = delete;
  registered_memory& operator=(const registered_memory&) = delete;
  registered_memory(registered_memory&& other) noexcept;
  registered_memory& operator=(registered_memory&& other) noexcept;

  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return data_ == nullptr; }
  [[nodiscard]] device_kind backend() const noexcept { return backend_; }
  [[nodiscard]] register_flags flags() const noexcept { return flags_; }

  /// @brief Unregisters now (nothing when empty); the object is empty afterwards.
  void reset() noexcept;

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
  register_flags flags_{};
  device_kind backend_ = device_kind::cuda;
};

}  // namespace syncmem::mr
