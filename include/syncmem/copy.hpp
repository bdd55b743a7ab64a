#pragma once

// The tables below keep their rows only while clang-format leaves them alone.
// clang-format off
/// @file copy.hpp
/// @brief The transfer engine: one copy for every pair of pageable host,
/// pinned host, device and another device's memory, at the speed of the bus.
///
/// The engine looks at each pointer itself (get_pointer_attributes) and picks
/// a path (copy_path):
///
/// | source → destination                                     | path                                 |
/// |----------------------------------------------------------|--------------------------------------|
/// | host ↔ host (pageable or pinned)                         | host_memcpy                          |
/// | pinned ↔ device, device → same device, managed           | dma                                  |
/// | pageable ↔ device, up to direct_threshold                | dma (the backend's own copy)         |
/// | pageable → device, larger                                | staged_to_device                     |
/// | device → pageable, larger                                | staged_to_host                       |
/// | device → another device, peer access                     | peer_dma                             |
/// | device → another device, no peer access                  | peer_staged                          |
/// | device → a device of the other backend (CUDA ↔ emulated) | across_backends: through host memory |
///
/// Pinned memory is memory the backend of `stream` has page-locked:
/// cudaHostAlloc, caching_pinned_resource, registered_memory (or an emulated
/// backend's own pinned memory, for emulated streams).
///
/// ## Which stream
/// `stream` must belong to a device whose memory the copy touches: the device
/// of device memory on either side (for a copy between two devices, either
/// one). A copy between host memory alone may use a stream of any device.
/// A stream of a device the copy does not involve is a syncmem::logic_error.
///
/// ## What every path guarantees
/// (a) The copy reads and writes after all work enqueued on `stream` before
///     the call (the engine's host threads wait for that work where they touch
///     the memory themselves).
/// (b) Work enqueued on `stream` after copy_async returns is ordered after
///     every device-side access of the copy: DMA reads of a device source and
///     writes to a device destination. An event recorded on `stream` right
///     after the call therefore covers the device side, and a kernel enqueued
///     next on `stream` may overwrite the source or read the destination.
/// (c) A host destination is complete when the transfer is ready(): wait() on
///     it, or ready() returning true, before reading it on the host.
///
/// ## When may the source be reused, when is the destination complete
/// In general: host writes to the source, and host reads of the destination,
/// after the transfer is ready; device-side work on `stream`, at once (b).
/// Paths that finish more at return:
///
/// | path                                  | source (host writes)         | destination complete                  |
/// |---------------------------------------|------------------------------|---------------------------------------|
/// | host_memcpy                           | at return                    | at return (ready at once)             |
/// | dma, pinned side                      | when ready                   | device: on-stream; pinned: when ready |
/// | dma, pageable source ≤ threshold      | when ready                   | device: on-stream                     |
/// | dma, pageable destination ≤ threshold | device source: at once       | at return (ready at once)             |
/// | staged_to_device                      | at return (read in the call) | on-stream                             |
/// | staged_to_host                        | device source: at once       | at return (ready at once)             |
/// | peer_dma / peer_staged                | device source: at once       | on-stream                             |
/// | across_backends                       | at return                    | at return (ready at once)             |
///
/// "On-stream": for work enqueued on `stream`, at once; elsewhere, when the
/// transfer is ready.
///
/// The staged paths work synchronously on the host: staged_to_device returns
/// once the last chunk's DMA is enqueued (its host threads have read the whole
/// source, after waiting for `stream`); staged_to_host returns when the copy is
/// complete (every device-side read has then completed, which is how it keeps
/// (b) without holding pinned memory for the whole copy). host_memcpy waits
/// for `stream`, then copies.
///
/// ## Bad input
/// Null pointers with a nonzero size, overlapping ranges, ranges that wrap the
/// address space, and a range that runs past the end of its allocation (where
/// the allocation is known: device memory, pinned memory) are a
/// syncmem::logic_error naming the argument; nothing is copied. Zero bytes
/// copy nothing and return a ready transfer, whatever the pointers.
///
/// ## Thread safety
/// copy_async may be called from many threads at once. A transfer object
/// belongs to one thread at a time.
// clang-format on

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "syncmem/device_id.hpp"
#include "syncmem/stream.hpp"

namespace syncmem {

namespace mr {
class caching_pinned_resource;
}

namespace detail {
struct transfer_state;
struct transfer_access;
}  // namespace detail

/// @brief How a copy went (see the table in copy.hpp).
enum class copy_path : unsigned char {
  none,              ///< nothing to copy (zero bytes)
  host_memcpy,       ///< host to host, by host threads
  dma,               ///< one copy by the backend (cudaMemcpyAsync)
  staged_to_device,  ///< pageable to device through pinned chunks, host copies overlapping the DMA
  staged_to_host,    ///< device to pageable through pinned chunks, the DMA overlapping host copies
  peer_dma,          ///< device to another device, directly (peer access)
  peer_staged,       ///< device to another device through pinned host chunks
  across_backends,   ///< device to a device of the other backend, through host memory, complete at return
  batch,             ///< many copies, their DMAs in one submission each (cudaMemcpyBatchAsync); batch_copy.hpp
  batch_loop,        ///< many copies, one backend copy each (older runtimes, emulated devices, stream capture)
  batch_kernel,      ///< many copies, all made by copy kernels (copy_options::batch_kernel_max_copy)
};

/// @brief "none", "host_memcpy", "dma", ...
[[nodiscard]] std::string to_string(copy_path path);

/// @brief Tuning knobs of the engine. The defaults suit a PCIe Gen4/Gen5 GPU
/// and a server CPU; `syncmem bench` measures the effect of changing them.
struct copy_options {
  /// @brief Pageable copies up to this size take the backend's own path
  /// (cudaMemcpyAsync), larger ones are staged.
  std::size_t direct_threshold = std::size_t{256} << 10;
  /// @brief The first staging chunk; each next chunk is one and a half times
  /// the one before (uploads, rounded up to whole pages) or twice it
  /// (downloads), up to max_chunk, so that the pipeline starts at once.
  /// Chunks stay small (a few MiB): a copy ends with its last chunk's DMA (or
  /// host copy) alone.
  std::size_t min_chunk = std::size_t{512} << 10;
  std::size_t max_chunk = std::size_t{4} << 20;
  /// @brief Pinned buffers a staged copy cycles through (2 or more lets the
  /// host copy of one chunk overlap the DMA of the previous ones; more let
  /// the host threads run ahead of the DMAs). Large downloads take a block of
  /// twice as many and use its two halves in turn, one download after the
  /// other.
  int staging_buffers = 8;
  /// @brief Threads that copy on the host, the calling thread included; 0:
  /// half the cores, at most 8, and half as many again for the staged copies
  /// whose host side limits them (single uploads, short downloads), twice as
  /// many for a batch's uploads over 32 MiB (docs/transfers.md).
  int host_threads = 0;
  /// @brief Copy between devices directly when peer access can be enabled
  /// (it is enabled on first use); false stages through pinned host memory.
  bool peer_access = true;
  /// @brief In a batch (batch_copy.hpp), copies of up to this many bytes
  /// between memory the device addresses directly (its own memory, pinned
  /// host memory) are made by a copy kernel, a launch per few hundred copies,
  /// instead of a DMA each; downloads of up to this many bytes to pageable
  /// memory are written by it into the pinned staging, and uploads of up to
  /// 16 KiB from pageable memory are scattered by it from device scratch
  /// memory; 0: never. Below 4 GiB.
  /// The kernel runs on the device's SMs, beside other kernels, rather than
  /// on its copy engines.
  std::size_t batch_kernel_max_copy = std::size_t{256} << 10;
  /// @brief The pinned memory staged copies take their buffers from (it must
  /// hand out memory pinned for the stream's backend); nullptr:
  /// staging_resource(backend). Not owned: it must outlive the copies.
  mr::caching_pinned_resource* staging = nullptr;
};

/// @brief The options copy_async uses when given none.
[[nodiscard]] copy_options get_copy_options();
/// @brief Replaces them.
/// @throws syncmem::logic_error for a bad value (names the field and its valid range)
void set_copy_options(const copy_options& options);

/// @brief The pinned memory the engine stages through, per backend: made on
/// first use and never destroyed. Reserve blocks in it, read its statistics,
/// or trim it. A staged copy takes one block from it: `staging_buffers`
/// buffers of the copy's largest chunk (up to staging_buffers × max_chunk).
/// @throws syncmem::unsupported_error when `backend` has no devices
[[nodiscard]] mr::caching_pinned_resource& staging_resource(device_kind backend);

/// @brief A copy in flight. Move-only; a default-constructed one is complete.
///
/// Destroying a transfer neither waits for nor cancels the copy: what remains
/// of it is work on streams (DMA, in stream order), which completes like any
/// other; the engine's host threads are done with the copy when copy_async
/// returns. The staging memory it used is reused only once that work has
/// completed.
class transfer {
 public:
  transfer() noexcept;
  ~transfer();
  transfer(transfer&& other) noexcept;
  transfer& operator=(transfer&& other) noexcept;
  transfer(const transfer&) = delete;
  transfer& operator=(const transfer&) = delete;

  /// @brief Whether the destination is complete (see copy.hpp for what
  /// "complete" means for device memory).
  /// @throws syncmem::cuda_error when the device reports a failure of the copy
  [[nodiscard]] bool ready() const;
  /// @brief Blocks until the destination is complete.
  /// @throws syncmem::cuda_error when the copy failed
  void wait() const;
  /// @brief The path the copy took.
  [[nodiscard]] copy_path path() const noexcept { return path_; }

 private:
  friend struct detail::transfer_access;
  std::unique_ptr<detail::transfer_state> state_;
  copy_path path_ = copy_path::none;
};

/// @brief Copies `bytes` bytes from `src` to `dst` in order on `stream`;
/// returns at once where the path allows (see copy.hpp for each path).
/// @throws syncmem::logic_error for bad input (nothing is copied)
/// @throws syncmem::cuda_error when the backend fails
[[nodiscard]] transfer copy_async(void* dst, const void* src, std::size_t bytes, stream_view stream);
/// @brief The same, with options other than get_copy_options().
[[nodiscard]] transfer copy_async(void* dst, const void* src, std::size_t bytes, stream_view stream,
                                  const copy_options& options);

/// @brief copy_async(...).wait(): when it returns the destination is complete.
void copy(void* dst, const void* src, std::size_t bytes, stream_view stream);
void copy(void* dst, const void* src, std::size_t bytes, stream_view stream, const copy_options& options);

}  // namespace syncmem
