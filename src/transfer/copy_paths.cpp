// The engine's copy paths: one function per row of the path table in
// docs/transfers.md (copy_paths.hpp declares them).

#include "transfer/copy_paths.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "backend/backend.hpp"
#include "core/event_pool.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/event.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "transfer/copy_internal.hpp"
#include "transfer/host_copy_pool.hpp"
#include "transfer/staging_pacer.hpp"

namespace syncmem::detail {

namespace {

int threads_of(const copy_options& o) {
  return o.host_threads > 0 ? o.host_threads : host_copy_pool::default_threads();
}

// Makes work enqueued later on `s` wait for `e`, which may belong to another
// device of the same backend (CUDA allows that; stream_view::wait does not).
void wait_across(stream_view s, const event& e) {
  device_guard guard{s.device()};
  backend_for(s.device()).stream_wait_event(s.device().index(), s.handle(), e.handle());
}

event record_on(stream_view s) {
  event e = event_pool::instance().acquire(s.device());
  e.record(s);
  return e;
}

// Pinned buffers from the staging cache for one copy, side by side in one
// block (one allocation and one event per copy, not one per buffer); freed
// with the copy's stream, so that the cache reuses it only after the copy's
// DMAs.
class staging_ring {
 public:
  staging_ring(const copy_options& o, std::size_t count, std::size_t bytes, stream_view s)
      : resource_{o.staging != nullptr ? o.staging : &staging_resource(s.device().kind())},
        buffer_bytes_{bytes},
        block_bytes_{count * bytes},
        stream_{s},
        block_{static_cast<std::byte*>(resource_->allocate(block_bytes_, s))} {}
  ~staging_ring() {
    if (host_only_) {
      resource_->deallocate_host_only(block_, block_bytes_);
    } else {
      resource_->deallocate(block_, block_bytes_, stream_);
    }
  }
  staging_ring(const staging_ring&) = delete;
  staging_ring& operator=(const staging_ring&) = delete;

  std::byte* operator[](std::size_t i) const { return block_ + i * buffer_bytes_; }
  // Every device use of the buffers has completed: no event needed on free.
  void all_device_work_done() noexcept { host_only_ = true; }

 private:
  mr::caching_pinned_resource* resource_;
  std::size_t buffer_bytes_;
  std::size_t block_bytes_;
  stream_view stream_;
  std::byte* block_;
  bool host_only_ = false;
};

std::atomic<std::uint64_t> staged_upload_dmas{0};                     // see staged_upload_dma_count
std::atomic<std::uint64_t> staged_uploads_with_ordinary_stores{0};    // see ordinary_store_upload_count
std::atomic<std::uint64_t> staged_downloads_demoting{0};              // see demoting_download_count
std::atomic<std::uint64_t> staged_downloads_with_ordinary_stores{0};  // see ordinary_store_download_count
std::atomic<std::uint64_t> staged_downloads_on_alternate_half{0};     // see alternate_half_download_count
std::atomic<unsigned> download_ring_turn{0};  // bit 0: the ring the next download that keeps its lines takes

}  // namespace

void enqueue_copy(void* dst, const void* src, std::size_t bytes, stream_view s) {
  device_guard guard{s.device()};
  backend_for(s.device()).memcpy_async(dst, src, bytes, s.device().index(), s.handle());
}

// Host threads are about to touch memory that earlier work on `s` may use.
void wait_for_stream(stream_view s) {
  if (!s.ready()) s.synchronize();
}

transfer host_to_host(void* dst, const void* src, std::size_t bytes, stream_view s, const copy_options& o) {
  wait_for_stream(s);
  host_copy_pool::instance().copy(dst, src, bytes, threads_of(o));
  return transfer_complete(copy_path::host_memcpy);
}

transfer direct(void* dst, const void* src, std::size_t bytes, stream_view s, copy_path path) {
  enqueue_copy(dst, src, bytes, s);
  return transfer_after(s, path);
}

// Pageable source, small: the backend copies it. CUDA's driver may read the
// source at once rather than in stream order, so wait for the stream first (a).
transfer direct_from_pageable(void* dst, const void* src, std::size_t bytes, stream_view s) {
  if (backend_for(s.device()).traits().pageable_copies_may_read_early) wait_for_stream(s);
  return direct(dst, src, bytes, s, copy_path::dma);
}

// Pageable destination, small: complete at return on every backend, as
// cudaMemcpyAsync to pageable memory is on CUDA.
transfer direct_to_pageable(void* dst, const void* src, std::size_t bytes, stream_view s) {
  enqueue_copy(dst, src, bytes, s);
  event e = record_on(s);
  e.synchronize();
  event_pool::instance().release_completed(std::move(e));
  return transfer_complete(copy_path::dma);
}

// Pageable to device: host threads copy the chunks into pinned buffers while
// the DMAs of the chunks before them run; the caller finishes each chunk in
// turn, enqueues its DMA and opens the chunk that will reuse its buffer (the
// threads wait for the DMA before they write it). Returns once the last DMA
// is enqueued. staging_pacer sets the chunks, the threads and their pacing,
// and which chunks a DMA carries; docs/transfers.md, "The staging pipeline",
// says why each part is there; transfer/h2d and transfer/h2d-interleaved
// measure it.
//
// Stores: an upload over 2 MiB writes its later chunks with ordinary stores,
// since streaming stores (which write memory) slow the DMAs beside them
// (staging_pacer::upload_stores says which), and keeps every thread, without
// pacing.
transfer staged_to_device(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s, const copy_options& o,
                          const staging_thresholds& t) {
  const int threads = staging_pacer::upload_threads(bytes, o, t);
  host_copy_pool::instance().wake(threads);
  wait_for_stream(s);  // (a): earlier work on s may still write the source
  std::size_t largest = 0;
  const auto chunks = staging_pacer::plan_chunks(bytes, o, staging_pacer::growth::by_half, largest);
  const auto count = staging_pacer::ring_buffers(o, chunks.size());
  std::optional<staging_ring> ring{std::in_place, o, count, largest, s};
  const bool ordinary = bytes > t.ordinary_stores_above;
  auto pacer = staging_pacer::upload(count, threads, ordinary);
  {
    host_copy_pool::job job{
        host_copy_pool::instance(), host_copy_pool::job::direction::to_staging, nullptr, src, chunks, threads};
    if (ordinary) {
      const auto stores = staging_pacer::upload_stores(bytes, chunks.size(), t);
      job.set_stores(stores.ordinary_from, stores.demoted_from);
      staged_uploads_with_ordinary_stores.fetch_add(1, std::memory_order_relaxed);
    }
    for (std::size_t i = 0; i < count; ++i) job.open(i, (*ring)[i], nullptr);
    for (std::size_t i = 0; i < chunks.size();) {
      const std::size_t k = i % count;
      job.finish(i);
      std::size_t end = i + 1;  // one past the chunks this DMA carries
      // A chunk as large as its buffer ends where the next buffer starts (and
      // on the device, where the next chunk starts).
      if (pacer.carries_next(job, i, chunks.size(), chunks[i].bytes == largest)) job.finish(end++);
      const std::size_t n = chunks[end - 1].offset + chunks[end - 1].bytes - chunks[i].offset;
      enqueue_copy(dst + chunks[i].offset, (*ring)[k], n, s);
      staged_upload_dmas.fetch_add(1, std::memory_order_relaxed);
      pacer.dma_enqueued(job, k);
      for (std::size_t j = i; j < end; ++j) {  // each buffer the DMA read: its event, then its next chunk
        const bool reused = j + count < chunks.size();
        const event* read = pacer.buffer_used(j % count, s, reused);
        if (reused) job.open(j + count, (*ring)[j % count], read);
      }
      i = end;
    }
  }
  // Freed before the transfer's event is recorded, so that once the transfer
  // is ready the cache finds the buffers' events complete and reuses them.
  ring.reset();
  return transfer_after(s, copy_path::staged_to_device);
}

// Device to pageable: the DMAs of up to `staging_buffers` chunks are enqueued
// ahead; host threads copy each chunk out once its DMA has landed, and the
// caller refills a buffer as soon as its chunk is out. Finishes before
// returning, so every device-side read has completed (b) without pinning the
// whole copy. The first DMAs go out before the pool is woken and the job is
// built, so that those few microseconds overlap the first DMA.
//
// Demoting: a DMA into a buffer whose lines sit in cores' private caches runs
// far slower, which a short download meets at its start when it reuses the
// buffers of the last one; so short downloads demote what they read (with
// half as many threads again, since demoting costs them time), while long
// ones, limited by their copy-out, cannot spare that time.
//
// Two rings: a download that leaves its lines takes a block of twice the ring
// and uses its halves in turn, so that its first DMAs land in buffers the
// cores read a whole download ago, not in those the last download read at its
// end (transfer/d2h, bench/results/h200).
//
// Stores: downloads over 8 MiB up to 32 MiB copy out with ordinary stores,
// which leave memory to the DMAs they wait for (staging_thresholds).
transfer staged_to_host(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s, const copy_options& o,
                        const staging_thresholds& t) {
  std::size_t largest = 0;
  const auto chunks = staging_pacer::plan_chunks(bytes, o, staging_pacer::growth::doubling_then_halving, largest);
  const auto count = staging_pacer::ring_buffers(o, chunks.size());
  const bool demoting = staging_pacer::demotes_download(bytes, t);
  const std::size_t rings = demoting ? 1 : 2;
  staging_ring ring{o, rings * count, largest, s};
  // The half this download uses (see "Two rings" above).
  const bool second = !demoting && (download_ring_turn.fetch_xor(1U, std::memory_order_relaxed) & 1U) != 0;
  const std::size_t first = second ? count : 0;
  const auto buffer = [&](std::size_t i) { return ring[first + i % count]; };
  auto pacer = staging_pacer::download(count);
  const auto enqueue = [&](std::size_t i) {
    enqueue_copy(buffer(i), src + chunks[i].offset, chunks[i].bytes, s);
    (void)pacer.buffer_used(i % count, s, true);
  };
  for (std::size_t i = 0; i < count; ++i) enqueue(i);
  const int threads = staging_pacer::download_threads(bytes, o, t);
  host_copy_pool::instance().wake(threads);
  if (second) staged_downloads_on_alternate_half.fetch_add(1, std::memory_order_relaxed);
  {
    host_copy_pool::job job{
        host_copy_pool::instance(), host_copy_pool::job::direction::from_staging, dst, nullptr, chunks, threads};
    if (demoting) {
      staged_downloads_demoting.fetch_add(1, std::memory_order_relaxed);
    } else {
      job.keep_staging_lines();
    }
    if (staging_pacer::download_ordinary_stores(bytes, t)) {
      job.copy_out_with_ordinary_stores();
      staged_downloads_with_ordinary_stores.fetch_add(1, std::memory_order_relaxed);
    }
    for (std::size_t i = 0; i < count; ++i) job.open(i, buffer(i), pacer.gate(i));
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      job.finish(i);  // its threads waited for the chunk's DMA
      if (i + count < chunks.size()) {
        enqueue(i + count);  // into the buffer chunk i just left
        job.open(i + count, buffer(i + count), pacer.gate((i + count) % count));
      }
    }
  }
  ring.all_device_work_done();
  pacer.all_completed();
  return transfer_complete(copy_path::staged_to_host);
}

// Device to another device without peer access: each chunk goes down on a
// stream of the source device and up on a stream of the destination device,
// through a ring of pinned buffers, ordered by events alone: all of it is
// enqueued before returning and nothing waits on the host.
transfer staged_between_devices(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s, device_id from,
                                device_id to, const copy_options& o) {
  const stream_view down = s.device() == from ? s : engine_stream_of(from);
  const stream_view up = s.device() == to ? s : engine_stream_of(to);
  std::size_t largest = 0;
  const auto chunks = staging_pacer::plan_chunks(bytes, o, staging_pacer::growth::doubling, largest);
  const auto count = staging_pacer::ring_buffers(o, chunks.size());
  // Freed with `s` alone: every use of the buffers on the other stream comes
  // before an event that `s` waits for (the last upload, or each download).
  std::optional<staging_ring> ring{std::in_place, o, count, largest, s};
  event_slots before{1};
  event_slots landed{count};
  event_slots uploaded{count};
  if (down != s) {  // (a): the first reads wait for earlier work on s
    before.record(0, s);
    wait_across(down, before[0]);
  }
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const std::size_t k = i % count;
    if (uploaded.recorded(k)) wait_across(down, uploaded[k]);  // the buffer's previous chunk went up
    enqueue_copy((*ring)[k], src + chunks[i].offset, chunks[i].bytes, down);
    landed.record(k, down);
    wait_across(up, landed[k]);
    enqueue_copy(dst + chunks[i].offset, (*ring)[k], chunks[i].bytes, up);
    uploaded.record(k, up);
  }
  if (up != s) wait_across(s, uploaded[(chunks.size() - 1) % count]);  // (b)
  ring.reset();  // before the transfer's event, as in staged_to_device
  return transfer_after(s, copy_path::peer_staged);
}

// Device memory of two backends (a CUDA device and an emulated one): neither
// backend reaches the other's memory, so the copy goes through host memory in
// chunks, each coming down on a stream of the source's device and going up on
// a stream of the destination's device, and is complete at return.
transfer across_backends(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s, device_id from,
                         device_id to, const copy_options& o) {
  wait_for_stream(s);  // (a)
  const stream_view down = s.device() == from ? s : engine_stream_of(from);
  const stream_view up = s.device() == to ? s : engine_stream_of(to);
  const std::size_t step = std::min(bytes, o.max_chunk);
  const auto host = std::make_unique<std::byte[]>(step);
  for (std::size_t offset = 0; offset < bytes; offset += step) {
    const std::size_t n = std::min(step, bytes - offset);
    enqueue_copy(host.get(), src + offset, n, down);
    down.synchronize();
    enqueue_copy(dst + offset, host.get(), n, up);
    up.synchronize();
  }
  return transfer_complete(copy_path::across_backends);
}

bool upload_read_at_return(void* dst, const void* src, std::size_t bytes, stream_view stream) {
  if (bytes == 0 || bytes > read_at_return_upload_limit) return false;
  const device_guard guard{stream.device()};
  auto& backend = backend_for(stream.device());
  if (!backend.pageable_uploads_read_at_return(stream.device().index()) || stream_capturing(stream)) return false;
  thread_local std::array<std::byte, read_at_return_upload_limit> scratch;  // pageable: the driver reads it at once
  std::memcpy(scratch.data(), src, bytes);
  backend.memcpy_async(dst, scratch.data(), bytes, stream.device().index(), stream.handle());  // under the guard
  return true;
}

std::uint64_t staged_upload_dma_count() noexcept { return staged_upload_dmas.load(std::memory_order_relaxed); }
std::uint64_t ordinary_store_upload_count() noexcept {
  return staged_uploads_with_ordinary_stores.load(std::memory_order_relaxed);
}
void note_ordinary_store_upload() noexcept {
  staged_uploads_with_ordinary_stores.fetch_add(1, std::memory_order_relaxed);
}
std::uint64_t demoting_download_count() noexcept { return staged_downloads_demoting.load(std::memory_order_relaxed); }
std::uint64_t ordinary_store_download_count() noexcept {
  return staged_downloads_with_ordinary_stores.load(std::memory_order_relaxed);
}
std::uint64_t alternate_half_download_count() noexcept {
  return staged_downloads_on_alternate_half.load(std::memory_order_relaxed);
}

}  // namespace syncmem::detail
