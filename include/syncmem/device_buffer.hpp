#pragma once

/// @file device_buffer.hpp
/// @brief An owning, untyped, stream-ordered, resizable buffer of memory from
/// any syncmem memory resource (RMM's rmm::device_buffer).

#include <cstddef>
#include <optional>
#include <string>

#include "syncmem/device_id.hpp"
#include "syncmem/stream.hpp"

namespace syncmem {

namespace mr {
class memory_resource;
}

/// @brief `size()` bytes of memory from a memory resource (by default the
/// per-device resource of the stream's device), owned, freed by the destructor.
///
/// Streams. Every allocation and copy is ordered on a stream, and the buffer
/// remembers the last one it was given (`stream()`): its memory is valid in
/// order on that stream, and the destructor frees it there (the memory
/// resource contract: free on the stream of last use). Use on another stream
/// must be ordered after that one by the caller, or announced with
/// set_stream(). The stream must outlive the buffer or the next set_stream().
///
/// Contents. A new buffer's bytes are uninitialised. resize() and reserve()
/// keep the first min(old, new) bytes (copied on the device, in order on the
/// stream, when the buffer must move); nothing else is ever initialised.
///
/// Host copies. copy_from_host() and copy_to_host() go through the transfer
/// engine (copy.hpp): any host memory, pinned or pageable, at the engine's
/// speed; they return when the destination is complete.
///
/// Errors. Each names the buffer (its size, resource and stream's device),
/// the call, the argument and the valid range; a call that throws leaves the
/// buffer as it was (an out_of_memory from resize() keeps the old memory and
/// size). A call given a stream of another device than stream()'s is refused
/// up front with a syncmem::logic_error naming the buffer, the call and both
/// devices (a stream cannot be ordered after another device's stream).
///
/// Thread safety: like a standard container; distinct buffers are independent.
class device_buffer {
 public:
  /// @brief An empty buffer: no memory, no resource, no stream.
  device_buffer() noexcept = default;
  /// @brief `bytes` uninitialised bytes from `resource`, in order on `s`.
  /// @param resource nullptr: mr::get_per_device_resource(s.device())
  /// @throws syncmem::out_of_memory; syncmem::logic_error for a stream the resource refuses
  device_buffer(std::size_t bytes, stream_view s, mr::memory_resource* resource = nullptr);
  /// @brief `bytes` bytes copied from `source` (host or device memory), in order on `s`.
  /// @throws as device_buffer(bytes, s, resource), and syncmem::logic_error for a
  /// null source with bytes > 0; nothing is allocated then
  device_buffer(const void* source, std::size_t bytes, stream_view s, mr::memory_resource* resource = nullptr);
  /// @brief Frees the memory on stream(); never throws.
  ~device_buffer();

  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  /// @brief Takes the memory; `other` is empty afterwards.
  device_buffer(device_buffer&& other) noexcept;
  /// @brief Frees this buffer's memory on its stream, then takes `other`'s.
  device_buffer& operator=(device_buffer&& other) noexcept;

  /// @brief A deep copy on `s`, from the same resource (or `resource`).
  /// @throws syncmem::out_of_memory
  [[nodiscard]] device_buffer clone(stream_view s, mr::memory_resource* resource = nullptr) const;

  // ---- size ----------------------------------------------------------------------
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool is_empty() const noexcept { return size_ == 0; }
  /// @brief Bytes held without reallocating.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  /// @brief Sets the size; reallocates only past capacity(), keeping the first
  /// min(old, new) bytes. Ordered on `s`, which becomes stream().
  /// @throws syncmem::out_of_memory (the buffer is unchanged);
  /// syncmem::logic_error for an empty buffer without a resource given by a stream of it
  void resize(std::size_t bytes, stream_view s);
  /// @brief Makes capacity() at least `bytes`, keeping the contents and size.
  /// @throws syncmem::out_of_memory (the buffer is unchanged)
  void reserve(std::size_t bytes, stream_view s);
  /// @brief Makes capacity() equal to size(), keeping the contents.
  /// @throws syncmem::out_of_memory (the buffer is unchanged)
  void shrink_to_fit(stream_view s);

  // ---- memory ----------------------------------------------------------------------
  /// @brief The memory (null when capacity() is 0): device memory for a device resource.
  [[nodiscard]] void* data() noexcept { return data_; }
  [[nodiscard]] const void* data() const noexcept { return data_; }
  /// @brief The stream the memory is valid on in order, and will be freed on
  /// (empty for a default-constructed buffer).
  [[nodiscard]] std::optional<stream_view> stream() const noexcept { return stream_; }
  /// @brief Declares `s` the stream of last use (the caller ordered it after stream()).
  void set_stream(stream_view s) noexcept { stream_ = s; }
  /// @brief The resource the memory comes from (null for a default-constructed buffer).
  [[nodiscard]] mr::memory_resource* memory_resource() const noexcept { return resource_; }

  // ---- host copies -----------------------------------------------------------------
  /// @brief Copies `bytes` bytes from `source` (any memory) to offset `offset`,
  /// through the transfer engine, ordered on `s` (which becomes stream());
  /// returns when the buffer holds them.
  /// @throws syncmem::logic_error when [offset, offset + bytes) is not within size()
  void copy_from_host(const void* source, std::size_t bytes, stream_view s, std::size_t offset = 0);
  /// @brief Copies `bytes` bytes from offset `offset` to `destination` (any
  /// memory), ordered on `s`; returns when `destination` holds them.
  /// @throws syncmem::logic_error when [offset, offset + bytes) is not within size()
  void copy_to_host(void* destination, std::size_t bytes, stream_view s, std::size_t offset = 0) const;

  /// @brief "device_buffer of 1.00 KiB (1024 bytes) from caching_resource(cuda:0), capacity ..."
  [[nodiscard]] std::string to_string() const;

 private:
  [[nodiscard]] std::string describe() const;
  void check_range(const char* function, std::size_t offset, std::size_t bytes) const;
  // Refuses a stream of another device than stream()'s, naming the call.
  void check_stream(const char* function, stream_view s) const;
  [[nodiscard]] mr::memory_resource& resource_for(stream_view s) const;
  // Moves to a new allocation of `bytes` (>= size_) on `s`, keeping the contents.
  void reallocate(std::size_t bytes, stream_view s);
  void release() noexcept;

  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  std::optional<stream_view> stream_;
  mr::memory_resource* resource_ = nullptr;
};

/// @brief device_buffer::to_string().
[[nodiscard]] inline std::string to_string(const device_buffer& b) { return b.to_string(); }

}  // namespace syncmem
