#pragma once

/// @file mr/memory_resource.hpp
/// @brief The one interface every memory resource implements.

#include <cstddef>
#include <optional>
#include <string>

#include "syncmem/device_id.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::mr {

/// @brief Alignment of memory handed out when none is asked for.
inline constexpr std::size_t default_alignment = 256;

/// @brief Base of every memory resource: allocate and deallocate memory of one
/// kind, ordered on streams.
///
/// The stream contract, written once here for every resource:
/// - `allocate(bytes, s)` returns memory that work enqueued on `s` after the
///   call may use at once. Using it on another stream needs that stream
///   ordered after `s` (an event), or the use declared to the resource (see
///   caching_resource::record_stream).
/// - `deallocate(p, bytes, s)` names the stream of last use. The resource may
///   hand the memory out again at once to work enqueued later on `s`, with no
///   host synchronisation; for any other stream it orders the reuse itself
///   (with events). Work on other streams that still uses the memory must be
///   declared or ordered before `s` by the caller.
/// - `bytes` and `alignment` given to deallocate are those given to allocate.
/// - Zero bytes: `allocate(0, s)` returns nullptr and touches nothing;
///   `deallocate(nullptr, 0, s)` does nothing.
/// - A device resource belongs to one device, fixed when it is made; it works
///   under a device_guard for that device, and a stream of another device is a
///   syncmem::logic_error naming both. Host resources take streams of any
///   device (the stream says where the memory is about to be used).
/// - Failure: allocate throws syncmem::out_of_memory (a std::bad_alloc) with
///   what the resource knows, or syncmem::logic_error for a bad argument (an
///   alignment that is not a power of two, or larger than the resource
///   supports); a failed allocate changes nothing. deallocate never throws.
/// - Thread safety: every resource may be called from many threads at once.
class memory_resource {
 public:
  memory_resource(const memory_resource&) = delete;
  memory_resource& operator=(const memory_resource&) = delete;
  memory_resource(memory_resource&&) = delete;
  memory_resource& operator=(memory_resource&&) = delete;
  virtual ~memory_resource() = default;

  /// @brief `bytes` bytes aligned to `alignment`, for use on `stream`.
  /// @throws syncmem::out_of_memory, syncmem::logic_error (see the class comment)
  [[nodiscard]] void* allocate(std::size_t bytes, stream_view stream, std::size_t alignment = default_alignment);

  /// @brief Returns memory from allocate; `stream` is the stream of last use.
  void deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment = default_alignment) noexcept;

  /// @brief Whether memory from one may be deallocated through the other.
  [[nodiscard]] bool is_equal(const memory_resource& other) const noexcept {
    return this == &other || do_is_equal(other);
  }

  /// @brief The kind of memory handed out.
  [[nodiscard]] memory_kind kind() const noexcept { return kind_; }
  /// @brief The device of a device resource; empty for host resources.
  [[nodiscard]] std::optional<device_id> device() const noexcept { return device_; }
  /// @brief The largest alignment allocate accepts.
  [[nodiscard]] std::size_t max_alignment() const noexcept { return max_alignment_; }
  /// @brief A name for reports and errors, e.g. "caching_resource(cuda:0)".
  [[nodiscard]] virtual std::string name() const = 0;

 protected:
  memory_resource(memory_kind kind, std::optional<device_id> device, std::size_t max_alignment) noexcept
      : device_{device}, max_alignment_{max_alignment}, kind_{kind} {}

 private:
  // A power of two (tested without std::has_single_bit, which is a library
  // call on targets without POPCNT) no larger than max_alignment().
  [[nodiscard]] bool valid_alignment(std::size_t a) const noexcept {
    return a != 0 && (a & (a - 1)) == 0 && a <= max_alignment_;
  }
  // Throws the logic_error for a request allocate() refuses (out of line).
  [[noreturn]] void reject(std::size_t alignment, stream_view stream) const;
  // deallocate() with a stream of another device: waits for it, then frees on the device's default stream.
  void deallocate_after(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept;
  virtual void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) = 0;
  virtual void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept = 0;
  [[nodiscard]] virtual bool do_is_equal(const memory_resource&) const noexcept { return false; }

  std::optional<device_id> device_;
  std::size_t max_alignment_;
  memory_kind kind_;
};

}  // namespace syncmem::mr
