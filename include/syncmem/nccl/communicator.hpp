#pragma once

/// @file nccl/communicator.hpp
/// @brief Collectives over NCCL on syncmem tensors, device buffers and raw
/// device memory, ordered on syncmem streams (target syncmem::nccl).
///
/// Plain C++: no CUDA nor NCCL header is needed to use it. On CUDA devices the
/// work is NCCL's; on emulated devices a host implementation with the same
/// semantics and checks runs in stream order on the emulated streams, so that
/// code using collectives is developed and tested without a GPU.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "syncmem/device_id.hpp"
#include "syncmem/dtype.hpp"
#include "syncmem/stream.hpp"

namespace syncmem {
class tensor;
class device_buffer;
namespace mr {
class caching_resource;
}
}  // namespace syncmem

namespace syncmem::nccl {

namespace detail {
class comm_backend;
struct call;
}  // namespace detail

/// @brief The reductions of all_reduce and reduce_scatter (ncclRedOp_t).
/// `avg` is defined for floating-point dtypes only.
enum class reduce_op : std::uint8_t { sum, prod, min, max, avg };

/// @brief "sum", "prod", "min", "max", "avg".
[[nodiscard]] std::string to_string(reduce_op op);

/// @brief Whether reductions are defined for `type`: every dtype but bool and
/// int16 (NCCL has no such types); `avg` also needs a floating-point one.
[[nodiscard]] bool can_reduce(dtype type, reduce_op op) noexcept;

/// @brief What ranks that form one communicator share (ncclUniqueId's 128 bytes).
struct unique_id {
  std::array<std::uint8_t, 128> bytes{};
};

/// @brief A fresh id for communicators on devices of `kind`: ncclGetUniqueId
/// for CUDA; for emulated devices, an id known within this process.
/// @throws syncmem::unsupported_error for CUDA in a build without NCCL's CUDA path
[[nodiscard]] unique_id make_unique_id(device_kind kind);

/// @brief What register_segments has registered with NCCL.
struct registration_statistics {
  std::size_t segments = 0;           ///< registered now
  std::size_t bytes = 0;              ///< in those segments
  std::uint64_t registrations = 0;    ///< ncclCommRegister calls that succeeded
  std::uint64_t deregistrations = 0;  ///< ncclCommDeregister calls
  std::uint64_t failures = 0;         ///< registrations refused (those segments take NCCL's copy path)
};

/// @brief One rank of an NCCL communicator, on one device.
///
/// Making one. `create_all(devices)` makes one communicator per device of
/// this process (ncclCommInitAll): rank i on devices[i]. The constructor
/// `communicator(id, nranks, rank, device)` makes one rank of a communicator
/// whose ranks join with the same id (ncclCommInitRank): every rank must be
/// made at once, from its own thread or process. Devices are all CUDA or all
/// emulated. On CUDA, NCCL_NVLS_ENABLE is set to 0 when the environment does
/// not set it (NVLink SHARP's multicast objects are not used).
///
/// Collectives. Every rank calls the same collectives in the same order (as
/// with NCCL). One thread that drives several ranks puts their calls between
/// a nccl::group's construction and destruction (ncclGroupStart/End), as
/// NCCL requires; it costs nothing on emulated devices. Such a group's calls
/// are checked when it ends, before any is issued: where the ranks of one
/// communicator that it drives disagree (a call refused on one rank but made
/// on another, or calls that differ), it issues none of them, since NCCL
/// would wait for ever (see nccl::group).
///
/// Streams. Each call is ordered on the stream `s` given, a stream of
/// device(): it runs after the work enqueued on `s` before the call, and work
/// enqueued on `s` later runs after it. Tensors bring their device side up to
/// date on `s` and record the write of a destination (synced_memory's
/// accessors), so the collective waits for their pending work on any stream
/// and later users wait for it. A device_buffer used on another stream than
/// `s` is ordered both ways with events: `s` waits for the buffer's stream
/// before the call, and the buffer's stream waits for `s` after it. Raw
/// pointers are the caller's to order.
///
/// Checks. Dtypes, counts and shapes are checked before anything is enqueued;
/// a syncmem::logic_error names the call, the argument, what it is and what
/// was expected, and nothing is enqueued. Emulated devices also check that the
/// ranks' calls match (kind, count, dtype, reduction, root, peers); a mismatch
/// is reported by the next synchronize() of the stream (NCCL would hang).
///
/// Registration. register_segments(resource) registers every segment of a
/// caching_resource of device() with NCCL (ncclCommRegister) as it comes, and
/// deregisters it before the resource gives it back, so that collectives on
/// tensors in cached memory take NCCL's zero-copy path: each segment is
/// registered once, however many buffers are cut from it.
///
/// Thread safety: one thread at a time per communicator; distinct
/// communicators (ranks) may be used from distinct threads.
class communicator {
 public:
  /// @brief One communicator per device, rank i on devices[i] (ncclCommInitAll).
  /// @throws syncmem::logic_error for no devices, repeated devices, or devices
  /// of both kinds; syncmem::unsupported_error for CUDA without NCCL
  [[nodiscard]] static std::vector<communicator> create_all(std::span<const device_id> devices);

  /// @brief Rank `rank` of `nranks`, on `device`, joined by `id` (ncclCommInitRank).
  /// Blocks until all ranks have joined.
  /// @throws syncmem::logic_error for nranks < 1 or a rank outside [0, nranks)
  communicator(const unique_id& id, int nranks, int rank, device_id device);

  /// @brief Waits for the communicator's work, deregisters its segments and
  /// destroys it (ncclCommDestroy). Never throws.
  ~communicator();
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  communicator(communicator&& other) noexcept;
  communicator& operator=(communicator&& other) noexcept;

  [[nodiscard]] int rank() const;
  [[nodiscard]] int size() const;
  [[nodiscard]] device_id device() const;

  // ---- raw device memory: `count` elements of `type` ------------------------------
  /// @brief recv = op over ranks of send (count elements; send == recv is in place).
  void all_reduce(const void* send, void* recv, std::size_t count, dtype type, reduce_op op, stream_view s);
  /// @brief recv = root's send (count elements; send is read on the root only).
  void broadcast(const void* send, void* recv, std::size_t count, dtype type, int root, stream_view s);
  /// @brief recv[r * send_count ...] = send of rank r.
  void all_gather(const void* send, void* recv, std::size_t send_count, dtype type, stream_view s);
  /// @brief recv = op over ranks of send[rank() * recv_count ...].
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type, reduce_op op, stream_view s);
  /// @brief Sends count elements to `peer`, which calls recv with the same count and dtype.
  void send(const void* buffer, std::size_t count, dtype type, int peer, stream_view s);
  /// @brief Receives count elements from `peer`.
  void recv(void* buffer, std::size_t count, dtype type, int peer, stream_view s);

  // ---- device buffers: the element count is size() / size_of(type) ------------------
  void all_reduce(const device_buffer& send, device_buffer& recv, dtype type, reduce_op op, stream_view s);
  void broadcast(device_buffer& buffer, dtype type, int root, stream_view s);
  void all_gather(const device_buffer& send, device_buffer& recv, dtype type, stream_view s);
  void reduce_scatter(const device_buffer& send, device_buffer& recv, dtype type, reduce_op op, stream_view s);
  void send(const device_buffer& buffer, dtype type, int peer, stream_view s);
  void recv(device_buffer& buffer, dtype type, int peer, stream_view s);

  // ---- tensors of device() ----------------------------------------------------------
  /// @brief recv = op over ranks of send: same dtype and shape.
  void all_reduce(const tensor& send, tensor& recv, reduce_op op, stream_view s);
  /// @brief In place.
  void all_reduce(tensor& t, reduce_op op, stream_view s);
  /// @brief Every rank's `t` becomes the root's.
  void broadcast(tensor& t, int root, stream_view s);
  /// @brief recv holds the ranks' send in rank order: shape (size() × n, ...)
  /// for a send of shape (n, ...), or (size(), n, ...).
  void all_gather(const tensor& send, tensor& recv, stream_view s);
  /// @brief recv = op over ranks of slice rank() of send: send of shape
  /// (size() × n, ...) or (size(), n, ...) for a recv of shape (n, ...).
  void reduce_scatter(const tensor& send, tensor& recv, reduce_op op, stream_view s);
  void send(const tensor& t, int peer, stream_view s);
  void recv(tensor& t, int peer, stream_view s);

  // ---- user-buffer registration --------------------------------------------------
  /// @brief Registers the segments of `resource` (a caching_resource of
  /// device()) now and as they come, and deregisters each before it is given
  /// back. When `resource` is destroyed first, its segments are deregistered then.
  /// A segment NCCL refuses is counted in failures and used unregistered.
  /// @throws syncmem::logic_error for a resource of another device, or one registered already
  void register_segments(mr::caching_resource& resource);
  /// @brief Deregisters the segments of `resource` and stops following it.
  /// @throws syncmem::logic_error when it was not registered
  void unregister_segments(mr::caching_resource& resource);
  [[nodiscard]] registration_statistics registrations() const;

  /// @brief "nccl communicator rank 1 of 2 on cuda:1".
  [[nodiscard]] std::string to_string() const;

 private:
  struct state;
  class attempt;
  explicit communicator(std::unique_ptr<state> s) noexcept;
  [[nodiscard]] state& checked(const char* call) const;
  void submit(const detail::call& c, stream_view s, bool pointers_known);

  std::unique_ptr<state> state_;
};

}  // namespace syncmem::nccl
