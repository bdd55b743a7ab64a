#pragma once

// The engine's entry for callers inside the library that already know what
// kind of memory each side is (synced_memory): it skips classifying the
// pointers, which on CUDA costs driver queries per call. Device memory is the
// memory of the stream's device.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "host_copy_pool.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/memory_kind.hpp"

namespace syncmem::detail {

[[nodiscard]] transfer copy_async_known(void* dst, memory_kind dst_kind, const void* src, memory_kind src_kind,
                                        std::size_t bytes, stream_view stream);

// The same, waiting until the destination is complete. A direct DMA (pinned or
// device memory on both sides) waits for the stream itself, which nothing was
// enqueued on after the copy: no event is needed for that.
void copy_known_and_wait(void* dst, memory_kind dst_kind, const void* src, memory_kind src_kind, std::size_t bytes,
                         stream_view stream);

// Ends `t`, which the caller knows has completed (its stream was synchronized
// after it): its event goes back to the pool as one needing no query.
void finish_completed(transfer& t) noexcept;

// The kind of host memory `p` is to the backend that will copy it (memory an
// emulated device pinned is pageable to CUDA, and the other way round).
[[nodiscard]] memory_kind host_memory_kind_for(const void* p, device_kind backend);

// How the chunks of a staged copy grow from copy_options::min_chunk to
// max_chunk: uploads by half (each chunk one and a half times the one before
// it, rounded up to whole pages), downloads and copies between devices by
// doubling (see staged_to_device in copy.cpp).
enum class chunk_growth { doubling, by_half };

// How a staged copy of `bytes` bytes is cut into chunks with `options` (see
// copy_options); `largest` is set to the largest chunk. Shared with the
// timeline tool (bench/tuning/transfer_timeline.cpp).
[[nodiscard]] std::vector<host_copy_pool::job::chunk> plan_chunks(std::size_t bytes, const copy_options& options,
                                                                  chunk_growth growth, std::size_t& largest);

// Uploads up to this size copy into their staging with half as many threads
// again as the default (see staged_to_device in copy.cpp).
inline constexpr std::size_t more_threads_for_uploads_up_to = std::size_t{4} << 20;

// How many threads, the caller included, copy a staged upload of `bytes`
// bytes into its staging (upload_threads) or out of it (download_threads):
// what the options set, else `usual` (the pool's default), half as many
// again for uploads up to more_threads_for_uploads_up_to or larger than
// copy_options::ordinary_stores_above and for downloads that demote. Shared
// with the timeline tool.
[[nodiscard]] int upload_threads(std::size_t bytes, const copy_options& options,
                                 int usual = host_copy_pool::default_threads()) noexcept;
[[nodiscard]] int download_threads(std::size_t bytes, const copy_options& options,
                                   int usual = host_copy_pool::default_threads()) noexcept;

// Whether a staged download of `bytes` bytes demotes the staging lines it
// reads (copy_options::demote_downloads_up_to). Shared with the timeline tool.
[[nodiscard]] bool demotes_download(std::size_t bytes, const copy_options& options) noexcept;

// DMAs that staged uploads have enqueued in this process, merged ones counted
// once (for tests).
[[nodiscard]] std::uint64_t staged_upload_dma_count() noexcept;

// Staged uploads that wrote their staging with ordinary stores
// (copy_options::ordinary_stores_above), in this process (for tests).
[[nodiscard]] std::uint64_t ordinary_store_upload_count() noexcept;

// Staged downloads that demoted their staging lines
// (copy_options::demote_downloads_up_to), in this process (for tests).
[[nodiscard]] std::uint64_t demoting_download_count() noexcept;

// Staged downloads that used the second of their block's two rings (larger
// than copy_options::demote_downloads_up_to: they alternate), in this process
// (for tests).
[[nodiscard]] std::uint64_t second_ring_download_count() noexcept;

}  // namespace syncmem::detail
