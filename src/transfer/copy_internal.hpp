#pragma once

// The engine's entry for callers inside the library that already know what
// kind of memory each side is (synced_memory): it skips classifying the
// pointers, which on CUDA costs driver queries per call. Device memory is the
// memory of the stream's device.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "syncmem/copy.hpp"
#include "syncmem/memory_kind.hpp"
#include "transfer/staging_pacer.hpp"

namespace syncmem::detail {

// What the engine knows of one side of a copy (see classify_pointer).
struct copy_side {
  memory_kind kind = memory_kind::pageable_host;
  std::optional<device_id> device;  // of device memory
  const void* base = nullptr;       // the allocation, when known
  std::size_t size = 0;
};

// The kind of `p` as the backend of a copy's stream sees it: memory the
// emulated backend pinned is pageable to CUDA.
[[nodiscard]] copy_side classify_pointer(const void* p, device_kind backend);
// The checks copy_async makes of one copy's classified sides (see copy.hpp,
// "Bad input" and "Which stream"); `what` names the call in the message.
void check_copy_extent(const void* p, std::size_t bytes, const copy_side& s, const char* which);
void check_copy_stream(stream_view stream, const copy_side& dst, const copy_side& src);
// Refuses options with a bad value (copy_async's check).
void check_copy_options(const copy_options& options);
// One copy of classified sides, by the path the table in copy.hpp gives
// (copy_classification.cpp); copy_sides copies nothing for zero bytes and
// stages with the library's thresholds.
[[nodiscard]] transfer dispatch_copy(void* dst, const copy_side& to, const void* src, const copy_side& from,
                                     std::size_t bytes, stream_view stream, const copy_options& options,
                                     const staging_thresholds& thresholds);
[[nodiscard]] transfer copy_sides(void* dst, const copy_side& to, const void* src, const copy_side& from,
                                  std::size_t bytes, stream_view stream, const copy_options& options);
// Memory the backend copies to and from by DMA alone, without the engine.
[[nodiscard]] inline bool is_direct_kind(memory_kind k) noexcept {
  return k == memory_kind::pinned_host || k == memory_kind::device;
}
// Whether `a` and `b` can reach each other's memory; enables peer access in
// both directions the first time (the decision is cached, see copy.cpp).
[[nodiscard]] bool peer_usable(device_id a, device_id b);
// A transfer that completes with the work enqueued on `s` so far (an event
// recorded now), or one complete at once.
[[nodiscard]] transfer transfer_after(stream_view s, copy_path path);
[[nodiscard]] transfer transfer_complete(copy_path path);
// Another transfer that completes with `t` (both share its event), for the
// buffers of a batch.
[[nodiscard]] transfer share_transfer(transfer& t);
// Waits for the work enqueued on `s` before host threads touch memory it may use.
void wait_for_stream(stream_view s);
// Whether `s` is being captured into a CUDA graph.
[[nodiscard]] bool stream_capturing(stream_view s);
// The engine's own stream on `device`.
[[nodiscard]] stream_view engine_stream_of(device_id device);

[[nodiscard]] transfer copy_async_known(void* dst, memory_kind dst_kind, const void* src, memory_kind src_kind,
                                        std::size_t bytes, stream_view stream);

// The same, waiting until the destination is complete. A direct DMA (pinned or
// device memory on both sides) waits for the stream itself, which nothing was
// enqueued on after the copy: no event is needed for that.
void copy_known_and_wait(void* dst, memory_kind dst_kind, const void* src, memory_kind src_kind, std::size_t bytes,
                         stream_view stream);

// Uploads at most this many bytes by upload_read_at_return.
inline constexpr std::size_t read_at_return_upload_limit = 4096;

// Uploads `bytes` (at most read_at_return_upload_limit) of host memory to
// device memory of the stream's CUDA device, in order on `stream`, having read
// the source when it returns: the bytes go through a pageable buffer of this
// thread, which the driver copies at the call, as every copy from pageable
// memory reads its source at return. Nothing waits for the source afterwards,
// so no event is recorded (a synced round trip of 4 B on an H100: about 3%
// of its time), and a host write right after waits for nothing. The source
// must not be written by work still queued. False, with nothing enqueued,
// where that does not hold: a larger copy, a backend that does not promise it
// (backend::pageable_uploads_read_at_return: emulated devices, devices that
// reach pageable memory through ATS) or a capturing stream (a graph cannot
// record a copy from pageable memory).
[[nodiscard]] bool upload_read_at_return(void* dst, const void* src, std::size_t bytes, stream_view stream);

// One copy of a batch whose caller knows the kinds (synced_memory); device
// memory is the memory of the stream's device. The batch skips classifying
// and checking (the caller's buffers never overlap).
struct known_copy {
  void* dst = nullptr;
  memory_kind dst_kind = memory_kind::device;
  const void* src = nullptr;
  memory_kind src_kind = memory_kind::device;
  std::size_t bytes = 0;
};
[[nodiscard]] transfer copy_batch_known(std::span<const known_copy> copies, stream_view stream);

// Ends `t`, which the caller knows has completed (its stream was synchronized
// after it): its event goes back to the pool as one needing no query.
void finish_completed(transfer& t) noexcept;

// The kind of host memory `p` is to the backend that will copy it (memory an
// emulated device pinned is pageable to CUDA, and the other way round).
[[nodiscard]] memory_kind host_memory_kind_for(const void* p, device_kind backend);

// copy_async with thresholds other than the library's.
[[nodiscard]] transfer copy_async_with(void* dst, const void* src, std::size_t bytes, stream_view stream,
                                       const copy_options& options, const staging_thresholds& thresholds);

// DMAs that staged uploads have enqueued in this process, merged ones counted
// once (for tests).
[[nodiscard]] std::uint64_t staged_upload_dma_count() noexcept;

// Staged uploads, and rounds of batched uploads, that wrote their staging
// with ordinary stores (staging_thresholds::ordinary_stores_above and
// batch_ordinary_stores_above), in this
// process (for tests); a batch counts its rounds with note_ordinary_store_upload.
[[nodiscard]] std::uint64_t ordinary_store_upload_count() noexcept;
void note_ordinary_store_upload() noexcept;

// Staged downloads that demoted their staging lines
// (staging_thresholds::demote_downloads_up_to), in this process (for tests).
[[nodiscard]] std::uint64_t demoting_download_count() noexcept;

// Staged downloads that copied out with ordinary stores
// (staging_thresholds::ordinary_download_stores_above), in this process (for
// tests).
[[nodiscard]] std::uint64_t ordinary_store_download_count() noexcept;

// Staged downloads that used the alternate half of their double staging block
// (those larger than staging_thresholds::demote_downloads_up_to alternate), in
// this process (for tests).
[[nodiscard]] std::uint64_t alternate_half_download_count() noexcept;

}  // namespace syncmem::detail
