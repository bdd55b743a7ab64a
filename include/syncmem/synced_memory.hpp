#pragma once

/// @file synced_memory.hpp
/// @brief A buffer with a host side and a device side that synchronise
/// themselves lazily and correctly under streams.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "syncmem/copy.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/stream.hpp"

namespace syncmem {

namespace mr {
class memory_resource;
}

/// @brief Which side holds the newest contents (Caffe's `head`).
enum class sync_state : std::uint8_t {
  uninitialized,  ///< nothing written yet, no memory allocated for the contents
  at_host,        ///< the host side is newest; the device side is stale or absent
  at_device,      ///< the device side is newest; the host side is stale or absent
  synced,         ///< both sides hold the same contents
};

/// @brief "uninitialized", "at_host", "at_device", "synced".
[[nodiscard]] std::string to_string(sync_state state);

/// @brief The kind of host memory a synced_memory allocates for itself.
enum class host_memory_kind : std::uint8_t {
  pinned,    ///< page-locked, from the library's caching pinned resource (DMA at full speed)
  pageable,  ///< ordinary memory (transfers go through the transfer engine's staging)
};

/// @brief What resize() does with the contents.
enum class resize_mode : std::uint8_t {
  keep,     ///< keep the first min(old, new) bytes, from the newest side
  discard,  ///< drop the contents: the buffer is uninitialized afterwards
};

/// @brief What happens when a buffer must grow past the size of borrowed memory.
enum class borrow_policy : std::uint8_t {
  throw_on_growth,  ///< throw syncmem::logic_error; nothing changes
  move_to_owned,    ///< allocate owned memory, move the contents there, release the borrowed memory
};

/// @brief How a synced_memory is made.
struct synced_memory_options {
  /// @brief A name used in every error and report about the buffer.
  std::string label;
  /// @brief Host memory the buffer allocates itself (borrowed memory may be of any kind).
  host_memory_kind host_kind = host_memory_kind::pinned;
  /// @brief Whether a side used for the first time is zero-filled. When false its
  /// contents are uninitialised (whatever the allocator returned).
  bool zero_fill = true;
  /// @brief What growing past borrowed memory does.
  borrow_policy on_borrowed_growth = borrow_policy::throw_on_growth;
  /// @brief Device memory comes from here; nullptr: mr::get_per_device_resource(device).
  mr::memory_resource* device_resource = nullptr;
  /// @brief Host memory comes from here; nullptr: the library's resource for host_kind.
  mr::memory_resource* host_resource = nullptr;
};

/// @brief How many copies a buffer made, each way, and how many bytes.
struct transfer_counters {
  std::uint64_t to_device_copies = 0;
  std::uint64_t to_device_bytes = 0;
  std::uint64_t to_host_copies = 0;
  std::uint64_t to_host_bytes = 0;
  std::uint64_t device_copies = 0;  ///< device-to-device copies (resize, clone)
  std::uint64_t device_bytes = 0;
  friend bool operator==(const transfer_counters&, const transfer_counters&) = default;
};

/// @brief A buffer of `size()` bytes with a host side and a device side, each
/// allocated on first use, that copies between them only when the side asked
/// for is stale (Caffe's SyncedMemory, with what it lacked).
///
/// Accessors. Read access (`host_data()`, `device_data(s)`) copies only when
/// that side is stale and leaves the state `synced`; write access
/// (`mutable_host_data()`, `mutable_device_data(s)`) does the same and then
/// marks that side newest. The pointer returned by a mutable accessor may be
/// written until the next call on the buffer; the state records the write
/// itself, nobody needs to call a `modify()`.
///
/// Streams. Device access is ordered on the stream given (default: the
/// device's default stream, the legacy stream 0 on CUDA, so that kernels
/// launched without a stream are ordered with it). The buffer remembers the
/// stream of its last device-side use: device access on another stream makes
/// that stream wait on an event recorded on the previous one (no host
/// blocking), and a host access that needs the device's contents copies them
/// in order on that stream and waits for exactly that copy. A device access
/// returns at once: the pointer is up to date in order on its stream, and the
/// state is `synced` (also behind a prefetch whose copy is still queued).
/// Prefetches alone start copies without blocking and are not claimed
/// `synced` before their copy has completed (Caffe's async_gpu_push was). A
/// syncmem::stream destroyed since its last use finished its work; a new
/// stream that got its handle is another stream. A stream syncmem does not
/// own (a wrapped cudaStream_t) must stay alive while the buffer may use it. Every copy in flight is tracked, and an
/// access that would race with it (e.g. a host write while an upload still reads the host side) waits for it first.
///
/// Capacity. `resize()` is grow-only: it reallocates only when the new size
/// exceeds the capacity, copying only the newest side. An empty buffer holds
/// no contents: it is `uninitialized` whatever is asked of it, and every
/// accessor returns null (a resize to 0 keeps the memory, not the contents).
///
/// Borrowing. Either side may be external memory of a given size, held alive
/// by an optional keep-alive; growing past it follows `borrow_policy`. The
/// keep-alive is let go once the work enqueued on that memory before the
/// buffer let go of it has completed (on a thread of the library's; the
/// caller does not wait), so it may hand the memory to a stream-ordered pool.
///
/// Device affinity. A buffer belongs to one device; everything that touches
/// the device (copies, allocation, frees in the destructor) runs under a
/// device_guard for it; a stream of another device is a syncmem::logic_error
/// naming both.
///
/// Thread safety: like a standard container. Calls on one buffer must not
/// overlap (even read access may copy), except `state()`, `ready()`,
/// `size()`, `capacity()`, `label()`, `device()` and `counters()` with each
/// other: they only read.
/// Different buffers are independent.
class synced_memory {
 public:
  /// @brief An empty buffer (no memory until it is resized) of the current device.
  synced_memory();
  /// @brief A buffer of `bytes` bytes of the current device; no memory until first use.
  explicit synced_memory(std::size_t bytes, synced_memory_options options = {});
  /// @brief A buffer of `bytes` bytes of `device`; no memory until first use.
  /// @throws syncmem::logic_error for an invalid device or a size over max_size()
  synced_memory(std::size_t bytes, device_id device, synced_memory_options options = {});
  ~synced_memory();

  synced_memory(const synced_memory&) = delete;
  synced_memory& operator=(const synced_memory&) = delete;
  /// @brief Cheap: takes the memory; the source refuses every later access.
  synced_memory(synced_memory&& other) noexcept;
  synced_memory& operator=(synced_memory&& other) noexcept;

  /// @brief A copy with the same size, contents, device, options and state (the
  /// clone of an empty buffer is uninitialized). Its counters count the one
  /// device-to-device copy that made it, if any.
  [[nodiscard]] synced_memory clone() const;

  // ---- access ------------------------------------------------------------------
  /// @brief The host side, up to date. Null for an empty buffer (and so for every accessor).
  [[nodiscard]] const void* host_data();
  /// @brief The host side, up to date; the host side becomes the newest.
  [[nodiscard]] void* mutable_host_data();
  /// @brief The device side, up to date in order on the device's default stream.
  [[nodiscard]] const void* device_data();
  /// @brief The device side, up to date in order on `s`.
  [[nodiscard]] const void* device_data(stream_view s);
  /// @brief As device_data(), and the device side becomes the newest.
  [[nodiscard]] void* mutable_device_data();
  /// @brief As device_data(s), and the device side becomes the newest.
  [[nodiscard]] void* mutable_device_data(stream_view s);

  // ---- typed access ------------------------------------------------------------
  // Spans over the accessors above: the same syncing, state changes and
  // stream ordering, with the element count in the span. A span of a
  // mutable accessor may be written until the next call on the buffer.

  // clang-format 14 cannot put a requires-clause on a line of its own.
  // clang-format off
  /// @brief The host side as `size() / sizeof(T)` elements, up to date.
  /// @tparam T a trivially copyable element type
  /// @throws syncmem::logic_error unless size() is a multiple of sizeof(T)
  template <class T>
  requires std::is_trivially_copyable_v<T>
  [[nodiscard]] std::span<const T> host_span() {
    const std::size_t n = element_count<T>("host_span");
    return {static_cast<const T*>(host_data()), n};
  }
  /// @brief The host side as elements, up to date; the host side becomes the newest.
  /// @throws syncmem::logic_error unless size() is a multiple of sizeof(T)
  template <class T>
  requires std::is_trivially_copyable_v<T> && (!std::is_const_v<T>)
  [[nodiscard]] std::span<T> mutable_host_span() {
    const std::size_t n = element_count<T>("mutable_host_span");
    return {static_cast<T*>(mutable_host_data()), n};
  }
  /// @brief The device side as elements, up to date in order on `s`: for
  /// kernels and device copies, not to be read on the host.
  /// @param s a stream of device()
  /// @throws syncmem::logic_error unless size() is a multiple of sizeof(T), or
  /// for a stream of another device
  template <class T>
  requires std::is_trivially_copyable_v<T>
  [[nodiscard]] std::span<const T> device_span(stream_view s) {
    const std::size_t n = element_count<T>("device_span");
    return {static_cast<const T*>(device_data(s)), n};
  }
  /// @brief device_span<T>(s) on the device's default stream.
  template <class T>
  requires std::is_trivially_copyable_v<T>
  [[nodiscard]] std::span<const T> device_span() {
    const std::size_t n = element_count<T>("device_span");
    return {static_cast<const T*>(device_data()), n};
  }
  /// @brief As device_span<T>(s), and the device side becomes the newest.
  /// @throws syncmem::logic_error unless size() is a multiple of sizeof(T), or
  /// for a stream of another device
  template <class T>
  requires std::is_trivially_copyable_v<T> && (!std::is_const_v<T>)
  [[nodiscard]] std::span<T> mutable_device_span(stream_view s) {
    const std::size_t n = element_count<T>("mutable_device_span");
    return {static_cast<T*>(mutable_device_data(s)), n};
  }
  /// @brief mutable_device_span<T>(s) on the device's default stream.
  template <class T>
  requires std::is_trivially_copyable_v<T> && (!std::is_const_v<T>)
  [[nodiscard]] std::span<T> mutable_device_span() {
    const std::size_t n = element_count<T>("mutable_device_span");
    return {static_cast<T*>(mutable_device_data()), n};
  }
  // clang-format on
  // ---- end of typed access ------------------------------------------------------

  /// @brief Starts bringing the device side up to date on `s`, without blocking.
  void prefetch_to_device(stream_view s);
  void prefetch_to_device();
  /// @brief Starts bringing the host side up to date on `s`, without blocking.
  void prefetch_to_host(stream_view s);
  void prefetch_to_host();
  /// @brief Whether no copy started by the buffer still reads or writes its
  /// host side: whether a host access would not wait for one. (The device
  /// side needs no asking: it is up to date in order on its stream.) A device
  /// access's upload of at most 4 KiB on a CUDA device (without ATS) has read
  /// the host side when it returns; a prefetch's copy counts until it has
  /// completed.
  [[nodiscard]] bool ready() const;
  /// @brief Waits for copies in flight and for all work on the stream of the
  /// last device-side use.
  void synchronize();

  // ---- state and size ----------------------------------------------------------
  [[nodiscard]] sync_state state() const;
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// @brief Bytes the buffer can hold without reallocating (borrowed memory
  /// counts with its size).
  [[nodiscard]] std::size_t capacity() const noexcept;
  /// @brief The largest size a buffer may have.
  [[nodiscard]] static constexpr std::size_t max_size() noexcept { return std::size_t{1} << 62; }
  /// @brief Sets the size; reallocates only when it exceeds the capacity.
  /// @throws syncmem::logic_error over max_size(), or when growing past borrowed
  /// memory with borrow_policy::throw_on_growth; syncmem::out_of_memory. On a
  /// throw nothing has changed.
  void resize(std::size_t bytes, resize_mode mode = resize_mode::keep);
  /// @brief How often resize() had to reallocate.
  [[nodiscard]] std::uint64_t reallocations() const noexcept { return reallocations_; }

  // ---- borrowing -------------------------------------------------------------------
  /// @brief Uses `bytes` bytes of external host memory at `p` as the host side;
  /// its contents become the buffer's (state `at_host`, size `bytes`). The
  /// memory must stay valid while borrowed; `keep_alive` is held until then.
  void borrow_host(void* p, std::size_t bytes, std::shared_ptr<void> keep_alive = {});
  /// @brief Uses external device memory of this buffer's device as the device
  /// side; its contents become the buffer's (state `at_device`, size `bytes`).
  /// @throws syncmem::logic_error when `p` is known to belong to another device
  void borrow_device(void* p, std::size_t bytes, std::shared_ptr<void> keep_alive = {});
  [[nodiscard]] bool host_borrowed() const noexcept { return host_.borrowed; }
  [[nodiscard]] bool device_borrowed() const noexcept { return device_side_.borrowed; }

  // ---- description -------------------------------------------------------------------
  [[nodiscard]] device_id device() const noexcept { return device_; }
  [[nodiscard]] const std::string& label() const noexcept { return label_; }
  /// @brief The kind of memory the host side is (or will be), e.g. pinned.
  [[nodiscard]] memory_kind host_memory() const noexcept { return host_.kind; }
  [[nodiscard]] const transfer_counters& counters() const noexcept { return counters_; }
  /// @brief The options the buffer was made with (its label is label(), not options().label).
  [[nodiscard]] const synced_memory_options& options() const noexcept { return options_; }
  /// @brief Whether each side currently has memory.
  [[nodiscard]] bool has_host_memory() const noexcept { return host_.ptr != nullptr; }
  [[nodiscard]] bool has_device_memory() const noexcept { return device_side_.ptr != nullptr; }

 private:
  friend void prefetch_to_device(std::span<synced_memory* const> buffers, stream_view s);
  friend void prefetch_to_host(std::span<synced_memory* const> buffers, stream_view s);
  friend void synchronize(std::span<synced_memory* const> buffers);

  // size() / sizeof(T), checked before any access so that a refused call changes nothing.
  template <class T>
  [[nodiscard]] std::size_t element_count(const char* accessor) const {
    if (size_ % sizeof(T) != 0) [[unlikely]]
      throw_not_whole_elements(accessor, sizeof(T));
    return size_ / sizeof(T);
  }
  // Out of line so that the message goes through SYNCMEM_FAIL like every other error.
  [[noreturn]] void throw_not_whole_elements(const char* accessor, std::size_t element_size) const;

  struct side {
    void* ptr = nullptr;
    std::size_t bytes = 0;  // allocated (or borrowed) bytes
    bool borrowed = false;
    memory_kind kind = memory_kind::pageable_host;
    std::shared_ptr<void> keep_alive;
    mr::memory_resource* resource = nullptr;
  };
  enum class in_flight : std::uint8_t { none, to_host, to_device };

  [[nodiscard]] std::string describe() const;
  void check_usable() const;
  void check_stream(stream_view s) const;
  [[nodiscard]] stream_view default_device_stream() const;
  // The stream of the last device-side use while it can still be used, else the default stream.
  [[nodiscard]] stream_view last_or_default_stream() const;
  // Orders `s` after the last device-side use and makes it the last.
  void order_on(stream_view s);
  [[nodiscard]] bool copy_running() const;
  void wait_for_copy() const;
  void finish_copy_if_done() const;
  void to_host(bool for_write);
  void to_device(stream_view s, bool prefetch);
  // Copies the whole buffer toward `direction` on `s`; the buffer is synced
  // once the copy completes (a prefetch reports the side before it till then).
  void start_copy(stream_view s, in_flight direction, bool prefetch);
  // The bookkeeping of a copy of the whole buffer that `t` carries.
  void copy_started(transfer t, in_flight direction, bool prefetch);
  [[nodiscard]] side allocate_host(std::size_t bytes) const;
  [[nodiscard]] side allocate_device(std::size_t bytes, stream_view s) const;
  void release_host() noexcept;
  void release_device() noexcept;
  void zero_host(std::size_t from, std::size_t to) const;
  void zero_device(std::size_t from, std::size_t to, stream_view s);
  void grow(std::size_t bytes, resize_mode mode);
  void reset() noexcept;
  void steal(synced_memory& other) noexcept;

  // The accessors' fast paths read only these first members.
  mutable sync_state state_ = sync_state::uninitialized;
  mutable in_flight in_flight_ = in_flight::none;
  bool moved_from_ = false;
  bool prefetch_in_flight_ = false;      // a prefetch is not claimed synced before its copy is done
  detail::stream_identity last_stream_;  // the stream of the last device-side use
  side host_;
  side device_side_;
  device_id device_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  std::string label_;
  synced_memory_options options_;
  mutable sync_state state_before_copy_ = sync_state::uninitialized;
  mutable transfer copy_;                     // the copy in flight, if any
  mutable std::optional<event> order_event_;  // orders a stream after the last one
  transfer_counters counters_;
  std::uint64_t reallocations_ = 0;
};

/// @brief Starts bringing the device side of every buffer up to date on `s`,
/// without blocking: what each buffer's prefetch_to_device(s) does, with the
/// copies of all of them in one batch (batch_copy.hpp: one submission where
/// the device can, pageable host sides gathered into one pinned staging
/// block). A buffer listed twice is prefetched once; null entries are refused.
/// @param s a stream of the buffers' device
/// @throws syncmem::logic_error for a null or moved-from buffer or a stream of
/// another device (nothing is started); syncmem::out_of_memory when device
/// memory or the staging cannot be had: no buffer's state has then changed
void prefetch_to_device(std::span<synced_memory* const> buffers, stream_view s);
/// @brief The same towards the host: every buffer whose device side is newest
/// starts its download on `s`, all in one batch. Pageable host sides are
/// complete at return.
void prefetch_to_host(std::span<synced_memory* const> buffers, stream_view s);
/// @brief Each buffer's synchronize(), waiting once for each stream.
void synchronize(std::span<synced_memory* const> buffers);

}  // namespace syncmem
