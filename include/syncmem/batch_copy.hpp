#pragma once

/// @file batch_copy.hpp
/// @brief Many copies at the cost of one: a batched copy_async over a list of
/// (destination, source, bytes).
///
/// Each copy in the list may be between any two kinds of memory, as for
/// copy_async (copy.hpp); the batch moves them with as few submissions as it
/// can:
///
/// - copies between pinned host and device memory (and device to the same
///   device, managed memory) go to the device together: one
///   cudaMemcpyBatchAsync (CUDA 12.8 or later) for the lot, every source read
///   in stream order (never the relaxed order: a kernel before the batch may
///   still be writing a device source);
/// - of those, the small ones (copy_options::batch_kernel_max_copy) between
///   the stream's device and pinned host memory, or within the device, whose
///   two sides lie at the same offset modulo 16, are made by a copy kernel
///   instead, a launch per few hundred copies, on the device's SMs: a DMA
///   each costs more than its bytes below a few hundred KiB;
/// - copies from pageable memory are gathered by the engine's host threads
///   into a ring of copy_options::staging_buffers pinned buffers of up to
///   max_chunk bytes, a group per buffer, each buffer gathered again once its
///   last group's DMA has read it, as a large single copy_async upload is
///   (those of at most 16 KiB to the stream's device go a group in one DMA
///   into device scratch memory taken from the device's resource, then
///   scattered by the copy kernel, where they are at least half the bytes
///   uploaded and batch_kernel_max_copy is not 0); copies to pageable memory
///   come down into one block of pinned staging (those of at most
///   batch_kernel_max_copy from the stream's device written by the copy
///   kernel) and are scattered from it;
///   both in groups that grow from copy_options::min_chunk to max_chunk, so
///   that the host threads and the DMAs overlap, each group one submission.
///   The block holds at most max_batch_staging bytes; a batch that downloads
///   more reuses it in rounds;
/// - copies that lie end to end on both sides (each one starting where the one
///   before it in the list ended, within one allocation) become one copy;
/// - a pointer in the same 2 MiB window of the address space as one the
///   driver found to be pageable is taken for pageable without asking again
///   (a query costs as much as a small copy's share of the batch). Device and
///   managed memory never share such a window with host memory; pinned or
///   registered memory that does is copied as pageable memory is, through the
///   staging, and its range is not checked against its allocation (as a
///   pageable range is not): the same bytes, more slowly (write-combined
///   memory much more slowly, the host threads reading it). A stream being
///   captured asks about every pointer;
/// - host to host copies are made by the host threads; copies between two
///   devices take copy_async's own path, one by one.
///
/// Where the backend cannot submit a batch (a CUDA runtime or driver older
/// than 12.8, emulated devices, the legacy default stream, which
/// cudaMemcpyBatchAsync refuses) each group's copies are enqueued one by one
/// instead, with the same results; transfer::path() then says batch_loop. It
/// says batch_kernel when the copy kernel made every copy.
///
/// ## Stream capture
/// While `stream` is being captured into a CUDA graph (cudaStreamIsCapturing)
/// the batch API cannot be used: each copy is captured as a node of its own
/// (one cudaMemcpyAsync each, transfer::path() batch_loop), and the transfer
/// returned is ready at once (the copies run when the graph is launched).
/// Only copies between pinned host, device and managed memory can be
/// captured; a batch with a copy that needs the engine's host threads
/// (pageable memory, host to host) or another device is refused with
/// syncmem::unsupported_error before anything is captured.
///
/// ## What the batch guarantees
/// What copy_async guarantees for one copy, for every copy of the list:
/// (a) and (b) of copy.hpp hold for the whole batch, and the transfer
/// returned is ready once every destination is complete. Copies to pageable
/// memory are complete at return; copies from pageable memory have read
/// their sources at return.
///
/// ## Bad input
/// What copy_async refuses for one copy is refused for any copy of the list,
/// naming its index; and a destination that overlaps another copy's
/// destination or source is refused (the copies of a batch run in no
/// particular order). A refused batch copies nothing. Zero-length copies are
/// skipped, whatever their pointers. The pinned staging is taken before
/// anything is enqueued: when it cannot be had the batch throws
/// syncmem::out_of_memory and copies nothing. A copy between two devices that
/// fails after the rest of the batch was enqueued reports the failure; the
/// copies before it in the list are then done or under way.
///
/// ## Thread safety
/// As copy_async.

#include <cstddef>
#include <span>

#include "syncmem/copy.hpp"
#include "syncmem/stream.hpp"

namespace syncmem {

/// @brief One copy of a batch: `bytes` bytes from `src` to `dst`.
struct copy_request {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
};

/// @brief The most pinned staging one batch takes for its copies to pageable
/// memory; a batch that downloads more reuses it in rounds. Its copies from
/// pageable memory take a ring of copy_options::staging_buffers buffers of up
/// to max_chunk bytes (and a cache line) besides.
inline constexpr std::size_t max_batch_staging = std::size_t{64} << 20;

/// @brief Copies every request in order on `stream`, with as few submissions
/// as the memory allows (see batch_copy.hpp).
/// @throws syncmem::logic_error for bad input (nothing is copied)
/// @throws syncmem::out_of_memory when the staging cannot be had (nothing is copied)
/// @throws syncmem::unsupported_error under stream capture, for a copy that cannot be captured (nothing is captured)
/// @throws syncmem::cuda_error when the backend fails
[[nodiscard]] transfer copy_async(std::span<const copy_request> copies, stream_view stream);
/// @brief The same, with options other than get_copy_options().
[[nodiscard]] transfer copy_async(std::span<const copy_request> copies, stream_view stream,
                                  const copy_options& options);

/// @brief copy_async(copies, stream).wait(): every destination is complete at return.
void copy(std::span<const copy_request> copies, stream_view stream);
void copy(std::span<const copy_request> copies, stream_view stream, const copy_options& options);

}  // namespace syncmem
