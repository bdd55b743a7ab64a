#pragma once

/// @file stream.hpp
/// @brief Streams: ordered queues of device work. `stream` owns one,
/// `stream_view` refers to one without owning it.
///
/// A stream belongs to one device. Work on one stream runs in the order it was
/// enqueued; work on different streams is unordered unless ordered by events.
/// A stream is held as an opaque `stream_handle`, which only its device's
/// backend reads, so no CUDA header is needed; include/syncmem/cuda/interop.hpp
/// converts to and from `cudaStream_t`.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "syncmem/device_id.hpp"

struct CUstream_st;

namespace syncmem {

class event;
class stream;
class stream_view;

namespace detail {
struct stream_access;
}

/// @brief A stream as its backend knows it, opaque to everyone else: the value
/// of a `cudaStream_t` on a CUDA device (0 is the legacy default stream), an
/// emulated stream on an emulated device. Comparable and hashable, so that
/// code can tell streams apart without knowing their backend.
enum class stream_handle : std::uintptr_t {};

/// @brief The default stream of a device: the legacy default stream (handle
/// 0) for a CUDA device, so that work launched without a stream is ordered
/// with it; a per-device worker stream for an emulated device.
/// @throws syncmem::logic_error for an invalid device.
[[nodiscard]] stream_view default_stream(device_id device);
/// @brief The default stream of the current device.
[[nodiscard]] stream_view default_stream();

/// @brief A non-owning reference to a stream of a known device. Cheap to copy.
/// Like RMM's cuda_stream_view it cannot be made from an int or nullptr; make
/// one from a `stream`, from default_stream(), or from a cudaStream_t through
/// include/syncmem/cuda/interop.hpp.
///
/// The stream must outlive every use of the view.
class stream_view {
 public:
  stream_view() = delete;
  stream_view(int) = delete;
  stream_view(std::nullptr_t) = delete;

  /// @brief The device the stream belongs to.
  [[nodiscard]] device_id device() const noexcept { return device_; }
  /// @brief The backend's handle of the stream.
  [[nodiscard]] stream_handle handle() const noexcept { return handle_; }
  /// @brief The handle as a `cudaStream_t` (nullptr is the legacy default
  /// stream), for CUDA code; meaningless for a stream of another kind of device.
  [[nodiscard]] CUstream_st* native_handle() const noexcept {
    return reinterpret_cast<CUstream_st*>(static_cast<std::uintptr_t>(handle_));  // NOLINT(performance-no-int-to-ptr)
  }
  /// @brief Whether this is default_stream(device()).
  [[nodiscard]] bool is_default() const;

  /// @brief Blocks until all work enqueued so far has completed.
  void synchronize() const;
  /// @brief Whether all work enqueued so far has completed.
  [[nodiscard]] bool ready() const;
  /// @brief Makes work enqueued later on this stream wait for the work that
  /// `e` was last recorded after (without blocking the host).
  /// @throws syncmem::logic_error when `e` belongs to another device.
  void wait(const event& e) const;
  /// @brief Enqueues a host function, run in stream order once the work before
  /// it has completed (cudaLaunchHostFunc on CUDA). It must not call into
  /// CUDA, nor throw; on an emulated device an exception it throws is reported
  /// by the next synchronize(). On a stream being captured (graph.hpp) it is
  /// recorded: the same function object runs at every launch of the graph and
  /// is destroyed with the graph.
  void launch_host_func(std::function<void()> fn) const;

  friend bool operator==(stream_view, stream_view) noexcept = default;

 private:
  friend class stream;
  friend struct detail::stream_access;
  constexpr stream_view(device_id device, stream_handle handle) noexcept : device_{device}, handle_{handle} {}

  device_id device_;
  stream_handle handle_;
};

/// @brief How a stream is made.
struct stream_options {
  /// @brief Whether the stream may run concurrently with the legacy default
  /// stream (cudaStreamNonBlocking). On by default.
  bool non_blocking = true;
  /// @brief Priority as for cudaStreamCreateWithPriority (lower is higher
  /// priority; 0 is the default). Emulated devices ignore it.
  int priority = 0;
};

/// @brief An owning stream. Move-only. Destroying it waits for the work
/// enqueued on it to finish, so that objects that remember the stream (a
/// synced_memory's last stream of use) can tell that its work is done. A
/// capture still open on it is discarded (and logged).
///
/// Thread safety: enqueueing from several threads is safe; moving or
/// destroying while other threads use it is not.
class stream {
 public:
  /// @brief A new stream on `device`.
  explicit stream(device_id device, stream_options options = {});
  /// @brief A new stream on the current device.
  stream();
  ~stream();

  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  stream(stream&& other) noexcept;
  stream& operator=(stream&& other) noexcept;

  /// @throws syncmem::logic_error on a moved-from stream.
  [[nodiscard]] stream_view view() const {
    if (!valid_) [[unlikely]]
      throw_moved_from();
    return {device_, handle_};
  }
  operator stream_view() const { return view(); }  // NOLINT(google-explicit-constructor)

  [[nodiscard]] device_id device() const noexcept { return device_; }
  void synchronize() const { view().synchronize(); }
  [[nodiscard]] bool ready() const { return view().ready(); }
  void wait(const event& e) const;
  void launch_host_func(std::function<void()> fn) const { view().launch_host_func(std::move(fn)); }

 private:
  void reset() noexcept;
  [[noreturn]] static void throw_moved_from();

  device_id device_;
  stream_handle handle_{};
  std::shared_ptr<void> alive_;  // expires when the stream is destroyed (see detail::stream_liveness)
  bool valid_ = false;
};

namespace detail {
/// @brief For syncmem's own code: whether a stream may still be used. Empty
/// (never expiring) for streams syncmem does not own (default streams, views
/// of cudaStream_t); for a syncmem::stream it expires when the stream is
/// destroyed, after its work has finished.
[[nodiscard]] std::weak_ptr<void> stream_liveness(stream_view s);
/// @brief For syncmem's own code: a view of a raw handle of a known device.
struct stream_access {
  static constexpr stream_view make(device_id device, stream_handle handle) noexcept { return {device, handle}; }
};

/// @brief For syncmem's own code: a stream remembered past a call (the stream
/// of a buffer's last use, a stream declared with record_stream).
///
/// A stream is its handle and, for a syncmem::stream, its liveness token: a
/// new stream that gets the handle of a destroyed one is a different stream,
/// whose work is not ordered after anything the dead one did. Streams syncmem
/// does not own have no token and are told apart by handle alone, which is
/// why they must outlive every remembered use (see synced_memory).
class stream_identity {
 public:
  /// @brief Remembers `s` (looks its liveness token up: not for hot paths).
  void remember(stream_view s);
  /// @brief Forgets the stream remembered, if any.
  void forget() noexcept;
  /// @brief Whether `s` is the stream remembered, alive, not merely a stream with its handle.
  [[nodiscard]] bool is(stream_view s) const noexcept {
    return usable() && handle_ == s.handle() && device_ == s.device();
  }
  /// @brief Whether a stream is remembered and may still be used (a destroyed
  /// syncmem::stream may not: its work finished before it went).
  [[nodiscard]] bool usable() const noexcept { return known_ && (!owned_ || !token_.expired()); }
  /// @brief A view of the stream remembered. Precondition: usable().
  [[nodiscard]] stream_view view() const noexcept { return stream_access::make(device_, handle_); }

 private:
  device_id device_ = device_id::cuda(0);
  stream_handle handle_{};
  bool known_ = false;
  bool owned_ = false;  // a syncmem::stream, whose token expires when it is destroyed
  std::weak_ptr<void> token_;
};
}  // namespace detail

}  // namespace syncmem
