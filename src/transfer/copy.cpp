#include "syncmem/copy.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/event_pool.hpp"
#include "core/log.hpp"
#include "core/release_at_exit.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "transfer/copy_internal.hpp"
#include "transfer/host_copy_pool.hpp"

namespace syncmem {

namespace detail {

struct transfer_state {
  std::optional<event> done;                     // recorded after the copy's last device-side access
  std::shared_ptr<const transfer_state> shared;  // or the state of a batch this transfer is part of
  [[nodiscard]] const event* done_event() const noexcept {
    if (done) return &*done;
    return shared && shared->done ? &*shared->done : nullptr;
  }
  transfer_state() = default;
  transfer_state(const transfer_state&) = delete;
  transfer_state& operator=(const transfer_state&) = delete;
  ~transfer_state() {
    if (done) event_pool::instance().release(std::move(*done));
  }
};

struct transfer_access {
  static transfer make(std::unique_ptr<transfer_state> state, copy_path path) {
    transfer t;
    t.state_ = std::move(state);
    t.path_ = path;
    return t;
  }
  static transfer share(transfer& t) {
    if (!t.state_) return make(nullptr, t.path_);
    if (!t.state_->shared) {
      std::shared_ptr<const transfer_state> whole{std::move(t.state_)};
      t.state_ = std::make_unique<transfer_state>();
      t.state_->shared = whole;
    }
    auto state = std::make_unique<transfer_state>();
    state->shared = t.state_->shared;
    return make(std::move(state), t.path_);
  }
  static void finish_completed(transfer& t) noexcept {
    if (t.state_ && t.state_->done) {
      event_pool::instance().release_completed(std::move(*t.state_->done));
      t.state_->done.reset();
    }
    t = transfer{};
  }
};

}  // namespace detail

namespace {

using detail::event_pool;
using detail::host_copy_pool;
using detail::transfer_state;

// ---- engine-wide state ---------------------------------------------------------

struct engine {
  std::mutex mutex;
  copy_options options;
  std::map<device_id, stream*> streams;  // never destroyed: copies may run after main()
  std::map<std::pair<device_id, device_id>, bool> peers;
  detail::per_kind<std::once_flag> staging_once;
  detail::per_kind<mr::caching_pinned_resource*> staging{};
  bool peer_warning_given = false;
};

engine& the_engine() {
  static auto* const e = new engine{};  // never destroyed, like what it holds
  return *e;
}

void check_options(const copy_options& o) {
  SYNCMEM_EXPECTS(o.min_chunk >= 1, "copy_options::min_chunk is 0: it must be at least 1 byte");
  SYNCMEM_EXPECTS(
      o.max_chunk >= o.min_chunk,
      fmt::format("copy_options::max_chunk is {}: it must be at least min_chunk ({})", o.max_chunk, o.min_chunk));
  SYNCMEM_EXPECTS(o.staging_buffers >= 1 && o.staging_buffers <= 64,
                  fmt::format("copy_options::staging_buffers is {}: valid range is 1..64", o.staging_buffers));
  SYNCMEM_EXPECTS(o.host_threads >= 0 && o.host_threads <= 64,
                  fmt::format("copy_options::host_threads is {}: valid range is 0..64 (0: automatic)", o.host_threads));
  SYNCMEM_EXPECTS(o.batch_kernel_max_copy < (std::size_t{1} << 32),
                  fmt::format("copy_options::batch_kernel_max_copy is {}: it must be below 4 GiB (0: never)",
                              o.batch_kernel_max_copy));
}

int threads_of(const copy_options& o) {
  return o.host_threads > 0 ? o.host_threads : host_copy_pool::default_threads();
}

// A stream of the engine's own on `device`, for the half of a staged peer copy
// that does not run on the caller's stream.
stream_view engine_stream(device_id device) {
  auto& e = the_engine();
  std::lock_guard lock{e.mutex};
  auto& s = e.streams[device];
  if (s == nullptr) s = new stream{device};
  return s->view();
}

// Whether `a` and `b` can reach each other's memory; enables peer access in
// both directions the first time.
bool peer_usable(device_id a, device_id b) {
  auto& e = the_engine();
  const auto key = std::minmax(a, b);
  std::lock_guard lock{e.mutex};
  if (auto it = e.peers.find(key); it != e.peers.end()) return it->second;
  bool usable = false;
  try {
    auto& backend = detail::backend_for(a);
    bool can = false;
    {
      device_guard guard{a};
      can = backend.can_access_peer(a.index(), b.index());
    }
    if (can) {
      device_guard guard{b};
      can = backend.can_access_peer(b.index(), a.index());
    }
    if (can) {
      {
        device_guard guard{a};
        backend.enable_peer_access(a.index(), b.index());
      }
      {
        device_guard guard{b};
        backend.enable_peer_access(b.index(), a.index());
      }
      usable = true;
    }
  } catch (const std::exception& ex) {
    if (!e.peer_warning_given) {
      e.peer_warning_given = true;
      detail::logger().warn(
          "peer access between {} and {} could not be enabled ({}); copies between them are "
          "staged through pinned host memory",
          to_string(a), to_string(b), ex.what());
    }
    usable = false;
  }
  e.peers.emplace(key, usable);
  return usable;
}

// ---- what a pointer is -------------------------------------------------------------

using side = detail::copy_side;

// The kind of `p` as the backend of the copy's stream sees it: memory the
// emulated backend pinned is pageable to CUDA.
side classify(const void* p, device_kind backend) {
  const auto owner = detail::find_pointer_owner(p);
  if (!owner) return {};
  const pointer_attributes& a = owner->attributes;
  if (a.kind == memory_kind::device) return {memory_kind::device, a.device, a.base, a.size};
  if (owner->kind == backend || detail::backend_for(owner->kind).traits().pins_for_all_backends) {
    return {a.kind, std::nullopt, a.base, a.size};
  }
  return {memory_kind::pageable_host, std::nullopt, a.base, a.size};
}

std::string describe(const side& s) {
  if (s.kind == memory_kind::device) return fmt::format("device memory of {}", to_string(*s.device));
  return fmt::format("{} memory", to_string(s.kind));
}

bool is_host(const side& s) { return s.kind == memory_kind::pageable_host || s.kind == memory_kind::pinned_host; }

void check_extent(const void* p, std::size_t bytes, const side& s, const char* which) {
  if (s.size == 0) return;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const auto base = reinterpret_cast<std::uintptr_t>(s.base);
  const std::size_t available = base + s.size - address;
  SYNCMEM_EXPECTS(bytes <= available,
                  fmt::format("copy_async: the {} range [{}, +{}) runs {} bytes past the end of its allocation "
                              "({}, [{}, +{}))",
                              which, p, bytes, bytes - available, describe(s), s.base, s.size));
}

void check_stream(stream_view stream, const side& dst, const side& src) {
  const device_id sd = stream.device();
  check_device(sd);
  if ((src.kind == memory_kind::managed || dst.kind == memory_kind::managed) &&
      !detail::backend_for(sd).traits().copies_managed_memory) {
    SYNCMEM_FAIL(fmt::format("copy_async: managed memory needs a stream of a CUDA device, not {}", to_string(sd)));
  }
  if (!src.device && !dst.device) return;  // host memory alone: any device's stream
  if (src.device == sd || dst.device == sd) return;
  const device_id first = src.device ? *src.device : *dst.device;
  SYNCMEM_FAIL(fmt::format("copy_async: the stream belongs to {}, but the copy is from {} to {}; use a stream of {}",
                           to_string(sd), describe(src), describe(dst),
                           src.device && dst.device && *src.device != *dst.device
                               ? fmt::format("{} or {}", to_string(*src.device), to_string(*dst.device))
                               : to_string(first)));
}

// ---- building blocks -----------------------------------------------------------------

void enqueue_copy(void* dst, const void* src, std::size_t bytes, stream_view s) {
  device_guard guard{s.device()};
  detail::backend_for(s.device()).memcpy_async(dst, src, bytes, s.device().index(), s.native_handle());
}

// Makes work enqueued later on `s` wait for `e`, which may belong to another
// device of the same backend (CUDA allows that; stream_view::wait does not).
void wait_across(stream_view s, const event& e) {
  device_guard guard{s.device()};
  detail::backend_for(s.device()).stream_wait_event(s.device().index(), s.native_handle(), e.native_handle());
}

event record_on(stream_view s) {
  event e = event_pool::instance().acquire(s.device());
  e.record(s);
  return e;
}

std::unique_ptr<transfer_state> done_after(stream_view s) {
  auto state = std::make_unique<transfer_state>();
  state->done = record_on(s);
  return state;
}

// Host threads are about to touch memory that earlier work on `s` may use.
void wait_for(stream_view s) {
  if (!s.ready()) s.synchronize();
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

// The events of a staged copy's buffers, given back to the pool however the
// copy ends. A slot is always recorded on the same stream, so recording it
// again cannot release a wait queued on its previous record early.
class event_slots {
 public:
  explicit event_slots(std::size_t count) : slots_(count) {}
  ~event_slots() {
    for (auto& e : slots_) {
      if (!e) continue;
      if (completed_) {
        event_pool::instance().release_completed(std::move(*e));
      } else {
        event_pool::instance().release(std::move(*e));
      }
    }
  }
  event_slots(const event_slots&) = delete;
  event_slots& operator=(const event_slots&) = delete;

  [[nodiscard]] bool recorded(std::size_t k) const { return slots_[k].has_value(); }
  [[nodiscard]] const event& operator[](std::size_t k) const { return *slots_[k]; }
  void record(std::size_t k, stream_view s) {
    if (!slots_[k]) slots_[k] = event_pool::instance().acquire(s.device());
    slots_[k]->record(s);
  }
  // Every event has been waited for.
  void all_completed() noexcept { completed_ = true; }

 private:
  std::vector<std::optional<event>> slots_;
  bool completed_ = false;
};

// ---- the paths --------------------------------------------------------------------------

std::atomic<std::uint64_t> staged_upload_dmas{0};                   // see detail::staged_upload_dma_count
std::atomic<std::uint64_t> staged_uploads_with_ordinary_stores{0};  // see detail::ordinary_store_upload_count
std::atomic<std::uint64_t> staged_downloads_demoting{0};            // see detail::demoting_download_count
std::atomic<std::uint64_t> staged_downloads_on_alternate_half{0};   // see detail::alternate_half_download_count
std::atomic<unsigned> download_ring_turn{0};  // bit 0: the ring the next download that keeps its lines takes

// An upload with ordinary stores writes its first chunks with streaming stores,
// whose DMAs follow at once, and demotes its last ones, whose DMAs follow
// before the lines leave the writers' caches (see "Stores" at staged_to_device).
constexpr std::size_t streaming_head_chunks = 5;
constexpr std::size_t demoted_tail_chunks = 3;

transfer host_to_host(void* dst, const void* src, std::size_t bytes, stream_view s, const copy_options& o) {
  wait_for(s);
  host_copy_pool::instance().copy(dst, src, bytes, threads_of(o));
  return detail::transfer_access::make(nullptr, copy_path::host_memcpy);
}

transfer direct(void* dst, const void* src, std::size_t bytes, stream_view s, copy_path path) {
  enqueue_copy(dst, src, bytes, s);
  return detail::transfer_access::make(done_after(s), path);
}

// Pageable source, small: the backend copies it. CUDA's driver may read the
// source at once rather than in stream order, so wait for the stream first (a).
transfer direct_from_pageable(void* dst, const void* src, std::size_t bytes, stream_view s) {
  if (detail::backend_for(s.device()).traits().pageable_copies_may_read_early) wait_for(s);
  return direct(dst, src, bytes, s, copy_path::dma);
}

// Pageable destination, small: complete at return on every backend, as
// cudaMemcpyAsync to pageable memory is on CUDA.
transfer direct_to_pageable(void* dst, const void* src, std::size_t bytes, stream_view s) {
  enqueue_copy(dst, src, bytes, s);
  event e = record_on(s);
  e.synchronize();
  event_pool::instance().release_completed(std::move(e));
  return detail::transfer_access::make(nullptr, copy_path::dma);
}

// Pageable to device: host threads copy the chunks into pinned buffers while
// the DMAs of the chunks before them run; the caller finishes each chunk in
// turn, enqueues its DMA and opens the chunk that will reuse its buffer (the
// threads wait for the DMA before they write it). Returns once the last DMA
// is enqueued. docs/transfers.md, "The staging pipeline", says why each part
// is there; transfer/h2d and transfer/h2d-interleaved measure it.
//
// Growth: chunks grow by half rather than double, because the host copies a
// cached source at only about the link's speed and doubling chunks left the
// link idle while each copy outlasted the DMA before it.
//
// Threads: short uploads and uploads with ordinary stores take half as many
// threads again (upload_threads), so that no late thread holds up the chunk
// the link waits for, and so that a source read from memory keeps the link fed.
//
// Pacing: host copies running far ahead of the link slow its DMAs, so the job
// drops one thread each time a chunk is ready while two DMAs are still queued,
// and takes all of them back as soon as the link is about to run dry.
//
// Merging: a chunk that is ready while two DMAs are still queued goes in one
// DMA with the next chunk when that lies right after it in the ring, because
// each DMA costs the link about 2 us.
//
// Stores: a large upload writes its middle chunks with ordinary stores, since
// streaming stores (which write memory) slow the DMAs beside them, and keeps
// every thread, without pacing.
transfer staged_to_device(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s, const copy_options& o,
                          const detail::staging_thresholds& t) {
  const int threads = detail::upload_threads(bytes, o, t);
  host_copy_pool::instance().wake(threads);
  wait_for(s);  // (a): earlier work on s may still write the source
  std::size_t largest = 0;
  const auto chunks = detail::plan_chunks(bytes, o, detail::chunk_growth::by_half, largest);
  const auto count = std::min(static_cast<std::size_t>(o.staging_buffers), chunks.size());
  std::optional<staging_ring> ring{std::in_place, o, count, largest, s};
  event_slots sent{count};  // an event per buffer
  {
    host_copy_pool::job job{
        host_copy_pool::instance(), host_copy_pool::job::direction::to_staging, nullptr, src, chunks, threads};
    // With three buffers or more, every DMA gets an event (in the slot of each
    // chunk it carries), the host copies are paced to the link, and DMAs are
    // merged while it is busy (see the notes above).
    const bool pace = count >= 3;
    const bool ordinary = bytes > t.ordinary_stores_above;
    if (ordinary) {
      const std::size_t n = chunks.size();
      const std::size_t ordinary_from = std::min(n, streaming_head_chunks);
      job.set_stores(ordinary_from, n - std::min(n - ordinary_from, demoted_tail_chunks));
      staged_uploads_with_ordinary_stores.fetch_add(1, std::memory_order_relaxed);
    }
    for (std::size_t i = 0; i < count; ++i) job.open(i, (*ring)[i], nullptr);
    std::size_t dmas = 0;
    std::array<std::size_t, 2> previous{};  // the slots of the last two DMAs, the latest first
    for (std::size_t i = 0; i < chunks.size();) {
      const std::size_t k = i % count;
      job.finish(i);
      std::size_t end = i + 1;  // one past the chunks this DMA carries
      // The next chunk lies right after this one in the ring (and on the device).
      const bool adjacent = end < chunks.size() && end % count != 0 && chunks[i].bytes == largest;
      if (pace && dmas >= 2 && adjacent &&
          (job.finished(end) || (!sent[previous[0]].ready() && !sent[previous[1]].ready()))) {
        job.finish(end++);
      }
      const std::size_t n = chunks[end - 1].offset + chunks[end - 1].bytes - chunks[i].offset;
      enqueue_copy(dst + chunks[i].offset, (*ring)[k], n, s);
      staged_upload_dmas.fetch_add(1, std::memory_order_relaxed);
      if (pace && !ordinary && dmas >= 2) {
        if (sent[previous[0]].ready()) {
          job.set_helpers(threads);  // the link is about to run dry: every thread
        } else if (!sent[previous[1]].ready()) {
          job.set_helpers(std::max(1, job.helpers() - 1));  // two DMAs still queued: one thread fewer
        }
      }
      previous = {i % count, previous[0]};
      ++dmas;
      for (std::size_t j = i; j < end; ++j) {  // each buffer the DMA read: its event, then its next chunk
        if (pace || j + count < chunks.size()) sent.record(j % count, s);
        if (j + count < chunks.size()) job.open(j + count, (*ring)[j % count], &sent[j % count]);
      }
      i = end;
    }
  }
  // Freed before the transfer's event is recorded, so that once the transfer
  // is ready the cache finds the buffers' events complete and reuses them.
  ring.reset();
  return detail::transfer_access::make(done_after(s), copy_path::staged_to_device);
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
transfer staged_to_host(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s, const copy_options& o,
                        const detail::staging_thresholds& t) {
  std::size_t largest = 0;
  const auto chunks = detail::plan_chunks(bytes, o, detail::chunk_growth::doubling, largest);
  const auto count = std::min(static_cast<std::size_t>(o.staging_buffers), chunks.size());
  const bool demoting = detail::demotes_download(bytes, t);
  const std::size_t rings = demoting ? 1 : 2;
  staging_ring ring{o, rings * count, largest, s};
  // The half this download uses (see "Two rings" above).
  const bool second = !demoting && (download_ring_turn.fetch_xor(1U, std::memory_order_relaxed) & 1U) != 0;
  const std::size_t first = second ? count : 0;
  const auto buffer = [&](std::size_t i) { return ring[first + i % count]; };
  event_slots landed{count};  // an event per buffer
  const auto enqueue = [&](std::size_t i) {
    enqueue_copy(buffer(i), src + chunks[i].offset, chunks[i].bytes, s);
    landed.record(i % count, s);
  };
  for (std::size_t i = 0; i < count; ++i) enqueue(i);
  const int threads = detail::download_threads(bytes, o, t);
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
    for (std::size_t i = 0; i < count; ++i) job.open(i, buffer(i), &landed[i]);
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      job.finish(i);  // its threads waited for the chunk's DMA
      if (i + count < chunks.size()) {
        enqueue(i + count);  // into the buffer chunk i just left
        job.open(i + count, buffer(i + count), &landed[(i + count) % count]);
      }
    }
  }
  ring.all_device_work_done();
  landed.all_completed();
  return detail::transfer_access::make(nullptr, copy_path::staged_to_host);
}

// Device to another device without peer access: each chunk goes down on a
// stream of the source device and up on a stream of the destination device,
// through a ring of pinned buffers, ordered by events alone: all of it is
// enqueued before returning and nothing waits on the host.
transfer staged_between_devices(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s, device_id from,
                                device_id to, const copy_options& o) {
  const stream_view down = s.device() == from ? s : engine_stream(from);
  const stream_view up = s.device() == to ? s : engine_stream(to);
  std::size_t largest = 0;
  const auto chunks = detail::plan_chunks(bytes, o, detail::chunk_growth::doubling, largest);
  const auto count = std::min(static_cast<std::size_t>(o.staging_buffers), chunks.size());
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
  return detail::transfer_access::make(done_after(s), copy_path::peer_staged);
}

// Device memory of two backends (a CUDA device and an emulated one): neither
// backend reaches the other's memory, so the copy goes through host memory in
// chunks, each coming down on a stream of the source's device and going up on
// a stream of the destination's device, and is complete at return.
transfer across_backends(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s, device_id from,
                         device_id to, const copy_options& o) {
  wait_for(s);  // (a)
  const stream_view down = s.device() == from ? s : engine_stream(from);
  const stream_view up = s.device() == to ? s : engine_stream(to);
  const std::size_t step = std::min(bytes, o.max_chunk);
  const auto host = std::make_unique<std::byte[]>(step);
  for (std::size_t offset = 0; offset < bytes; offset += step) {
    const std::size_t n = std::min(step, bytes - offset);
    enqueue_copy(host.get(), src + offset, n, down);
    down.synchronize();
    enqueue_copy(dst + offset, host.get(), n, up);
    up.synchronize();
  }
  return detail::transfer_access::make(nullptr, copy_path::across_backends);
}

// Memory the backend copies to and from by DMA alone, without the engine.
bool is_direct_kind(memory_kind k) { return k == memory_kind::pinned_host || k == memory_kind::device; }

bool capturing(stream_view s) {
  device_guard guard{s.device()};
  return detail::backend_for(s.device()).stream_capturing(s.device().index(), s.native_handle());
}

// A copy on a stream being captured into a graph: recorded as one node where
// the backend copies it alone (pinned host, device and managed memory of the
// stream's device, or a peer), refused where the engine needs its host
// threads, staging buffers or a wait for the stream, none of which a graph
// can replay. The transfer has nothing to wait for: the copy runs at launch.
transfer captured(void* dst, const side& to, const void* src, const side& from, std::size_t bytes, stream_view s,
                  const copy_options& o) {
  const bool recordable = [&] {
    if (is_host(to) && is_host(from)) return false;
    if (to.kind == memory_kind::pageable_host || from.kind == memory_kind::pageable_host) return false;
    if (to.kind == memory_kind::device && from.kind == memory_kind::device && *to.device != *from.device) {
      return to.device->kind() == from.device->kind() && o.peer_access && peer_usable(*from.device, *to.device);
    }
    return true;
  }();
  if (!recordable) {
    SYNCMEM_UNSUPPORTED(fmt::format(
        "copy_async: the stream of {} is being captured into a graph, and a copy of {} bytes from {} to {} cannot "
        "be captured (it needs host threads, staging buffers or a wait for the stream); only copies between pinned "
        "host, device and managed memory (or between peers) can; nothing was captured",
        to_string(s.device()), bytes, describe(from), describe(to)));
  }
  enqueue_copy(dst, src, bytes, s);
  const bool peer = to.kind == memory_kind::device && from.kind == memory_kind::device && *to.device != *from.device;
  return detail::transfer_access::make(nullptr, peer ? copy_path::peer_dma : copy_path::dma);
}

// The path of a copy the backend makes by itself, one DMA on the stream
// (between device, pinned and managed memory, or between peers); nullopt for
// the copies that need the engine or a host thread.
std::optional<copy_path> backend_copies_alone(const side& to, const side& from, const copy_options& o) {
  const auto alone = [](const side& s) { return is_direct_kind(s.kind) || s.kind == memory_kind::managed; };
  if (!alone(to) || !alone(from) || (is_host(to) && is_host(from))) return std::nullopt;
  if (to.kind != memory_kind::device || from.kind != memory_kind::device || *to.device == *from.device) {
    return copy_path::dma;
  }
  if (to.device->kind() == from.device->kind() && o.peer_access && peer_usable(*from.device, *to.device)) {
    return copy_path::peer_dma;
  }
  return std::nullopt;
}

// The path for two classified sides (see the table in copy.hpp).
transfer dispatch(void* dst, const side& to, const void* src, const side& from, std::size_t bytes, stream_view stream,
                  const copy_options& options, const detail::staging_thresholds& thresholds = {}) {
  auto* out = static_cast<std::byte*>(dst);
  const auto* in = static_cast<const std::byte*>(src);
  if (const auto path = backend_copies_alone(to, from, options)) {
    // The same copy whether or not the stream is being captured, so it goes
    // first: the capture query then costs a small copy no latency.
    enqueue_copy(dst, src, bytes, stream);
    if (capturing(stream)) return detail::transfer_access::make(nullptr, *path);  // runs at the graph's launch
    return detail::transfer_access::make(done_after(stream), *path);
  }
  if (capturing(stream)) return captured(dst, to, src, from, bytes, stream, options);
  if (is_host(to) && is_host(from)) return host_to_host(dst, src, bytes, stream, options);
  if (to.kind == memory_kind::managed || from.kind == memory_kind::managed) {
    return direct(dst, src, bytes, stream, copy_path::dma);
  }
  if (to.kind == memory_kind::device && from.kind == memory_kind::device) {
    if (*to.device == *from.device) return direct(dst, src, bytes, stream, copy_path::dma);
    if (to.device->kind() != from.device->kind()) {
      return across_backends(out, in, bytes, stream, *from.device, *to.device, options);
    }
    if (options.peer_access && peer_usable(*from.device, *to.device)) {
      return direct(dst, src, bytes, stream, copy_path::peer_dma);
    }
    return staged_between_devices(out, in, bytes, stream, *from.device, *to.device, options);
  }
  if (from.kind == memory_kind::device) {  // to host
    if (to.kind == memory_kind::pinned_host) return direct(dst, src, bytes, stream, copy_path::dma);
    if (bytes <= options.direct_threshold) return direct_to_pageable(dst, src, bytes, stream);
    return staged_to_host(out, in, bytes, stream, options, thresholds);
  }
  // from host to device
  if (from.kind == memory_kind::pinned_host) return direct(dst, src, bytes, stream, copy_path::dma);
  if (bytes <= options.direct_threshold) return direct_from_pageable(dst, src, bytes, stream);
  return staged_to_device(out, in, bytes, stream, options, thresholds);
}

}  // namespace

namespace {
// One and a half times `n`, rounded up to whole pages, at most `most`.
std::size_t grow_by_half(std::size_t n, std::size_t most) {
  constexpr std::size_t page = 4096;
  constexpr std::size_t largest_safe = (std::numeric_limits<std::size_t>::max() - page) / 3 * 2;
  if (n >= most || n >= largest_safe) return most;
  return std::min(most, (n + n / 2 + page - 1) / page * page);
}
}  // namespace

// Chunks that start at min_chunk and grow up to max_chunk.
std::vector<host_copy_pool::job::chunk> detail::plan_chunks(std::size_t bytes, const copy_options& o,
                                                            chunk_growth growth, std::size_t& largest) {
  std::vector<host_copy_pool::job::chunk> chunks;
  largest = 0;
  std::size_t next = o.min_chunk;
  for (std::size_t offset = 0; offset < bytes;) {
    const std::size_t n = std::min(next, bytes - offset);
    chunks.push_back({offset, n});
    largest = std::max(largest, n);
    offset += n;
    if (growth == chunk_growth::doubling) {
      next = next > o.max_chunk / 2 ? o.max_chunk : next * 2;
    } else {
      next = grow_by_half(next, o.max_chunk);
    }
  }
  return chunks;
}

bool detail::demotes_download(std::size_t bytes, const staging_thresholds& t) noexcept {
  return bytes <= t.demote_downloads_up_to;
}

// Short uploads, uploads with ordinary stores and demoting downloads copy with
// half as many threads again as the default (see staged_to_device and
// staged_to_host), unless the options set a number: at most three quarters of
// the cores.
int detail::upload_threads(std::size_t bytes, const copy_options& o, const staging_thresholds& t, int usual) noexcept {
  if (o.host_threads > 0) return o.host_threads;
  return bytes <= more_threads_for_uploads_up_to || bytes > t.ordinary_stores_above ? usual * 3 / 2 : usual;
}

// A batch's uploads larger than that gather their many ranges with every
// thread the pool may have (twice the default: every core of a machine of up
// to 16), as their host side, not the link, limits them (docs/transfers.md).
int detail::batch_upload_threads(std::size_t bytes, const copy_options& o, const staging_thresholds& t,
                                 int usual) noexcept {
  if (o.host_threads > 0) return o.host_threads;
  return bytes > t.ordinary_stores_above ? usual * 2 : upload_threads(bytes, o, t, usual);
}

int detail::download_threads(std::size_t bytes, const copy_options& o, const staging_thresholds& t,
                             int usual) noexcept {
  if (o.host_threads > 0) return o.host_threads;
  return demotes_download(bytes, t) ? usual * 3 / 2 : usual;
}

std::uint64_t detail::staged_upload_dma_count() noexcept { return staged_upload_dmas.load(std::memory_order_relaxed); }
std::uint64_t detail::ordinary_store_upload_count() noexcept {
  return staged_uploads_with_ordinary_stores.load(std::memory_order_relaxed);
}
void detail::note_ordinary_store_upload() noexcept {
  staged_uploads_with_ordinary_stores.fetch_add(1, std::memory_order_relaxed);
}
std::uint64_t detail::demoting_download_count() noexcept {
  return staged_downloads_demoting.load(std::memory_order_relaxed);
}
std::uint64_t detail::alternate_half_download_count() noexcept {
  return staged_downloads_on_alternate_half.load(std::memory_order_relaxed);
}

// ---- public ------------------------------------------------------------------------------

std::string to_string(copy_path path) {
  switch (path) {
    case copy_path::none:
      return "none";
    case copy_path::host_memcpy:
      return "host_memcpy";
    case copy_path::dma:
      return "dma";
    case copy_path::staged_to_device:
      return "staged_to_device";
    case copy_path::staged_to_host:
      return "staged_to_host";
    case copy_path::peer_dma:
      return "peer_dma";
    case copy_path::peer_staged:
      return "peer_staged";
    case copy_path::across_backends:
      return "across_backends";
    case copy_path::batch:
      return "batch";
    case copy_path::batch_loop:
      return "batch_loop";
    case copy_path::batch_kernel:
      return "batch_kernel";
  }
  return "unknown";
}

copy_options get_copy_options() {
  auto& e = the_engine();
  std::lock_guard lock{e.mutex};
  return e.options;
}

void set_copy_options(const copy_options& options) {
  check_options(options);
  auto& e = the_engine();
  std::lock_guard lock{e.mutex};
  e.options = options;
}

mr::caching_pinned_resource& staging_resource(device_kind backend) {
  if (device_count(backend) == 0) {
    SYNCMEM_UNSUPPORTED(
        fmt::format("staging_resource: no {} devices ({})", to_string(backend), why_no_devices(backend)));
  }
  auto& e = the_engine();
  // Never destroyed: transfers may still be freeing staging blocks after main().
  std::call_once(e.staging_once[backend], [&] {
    auto* r = new mr::caching_pinned_resource{backend};
    detail::release_at_exit([r] { r->trim(); });
    e.staging[backend] = r;
  });
  return *e.staging[backend];
}

transfer::transfer() noexcept = default;
transfer::~transfer() = default;
transfer::transfer(transfer&& other) noexcept
    : state_{std::move(other.state_)}, path_{std::exchange(other.path_, copy_path::none)} {}
transfer& transfer::operator=(transfer&& other) noexcept {
  if (this != &other) {
    state_ = std::move(other.state_);
    path_ = std::exchange(other.path_, copy_path::none);
  }
  return *this;
}

bool transfer::ready() const {
  const event* e = state_ ? state_->done_event() : nullptr;
  return e == nullptr || e->ready();
}

void transfer::wait() const {
  if (const event* e = state_ ? state_->done_event() : nullptr) e->synchronize();
}

transfer copy_async(void* dst, const void* src, std::size_t bytes, stream_view stream) {
  return copy_async(dst, src, bytes, stream, get_copy_options());
}

transfer copy_async(void* dst, const void* src, std::size_t bytes, stream_view stream, const copy_options& options) {
  return detail::copy_async_with(dst, src, bytes, stream, options, detail::staging_thresholds{});
}

transfer detail::copy_async_with(void* dst, const void* src, std::size_t bytes, stream_view stream,
                                 const copy_options& options, const staging_thresholds& thresholds) {
  if (bytes == 0) return {};
  check_options(options);
  SYNCMEM_EXPECTS(dst != nullptr, fmt::format("copy_async: the destination is null (copying {} bytes)", bytes));
  SYNCMEM_EXPECTS(src != nullptr, fmt::format("copy_async: the source is null (copying {} bytes)", bytes));
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  SYNCMEM_EXPECTS(d <= UINTPTR_MAX - bytes,
                  fmt::format("copy_async: the destination range [{}, +{}) wraps the address space", dst, bytes));
  SYNCMEM_EXPECTS(s <= UINTPTR_MAX - bytes,
                  fmt::format("copy_async: the source range [{}, +{}) wraps the address space", src, bytes));
  SYNCMEM_EXPECTS(
      d + bytes <= s || s + bytes <= d,
      fmt::format("copy_async: the destination [{}, +{}) and the source [{}, +{}) overlap", dst, bytes, src, bytes));
  // Current for the whole copy: the guards of the steps below then read and
  // switch nothing.
  const device_guard guard{stream.device()};
  const device_kind backend = stream.device().kind();
  side to, from;
  {
    const detail::pointer_queries queries;  // one capture-mode exchange for both
    to = classify(dst, backend);
    from = classify(src, backend);
  }
  check_extent(dst, bytes, to, "destination");
  check_extent(src, bytes, from, "source");
  check_stream(stream, to, from);

  return dispatch(dst, to, src, from, bytes, stream, options, thresholds);
}

transfer detail::copy_async_known(void* dst, memory_kind dst_kind, const void* src, memory_kind src_kind,
                                  std::size_t bytes, stream_view stream) {
  if (bytes == 0) return {};
  const device_guard guard{stream.device()};  // current for the whole copy, as in copy_async_with
  const auto side_of = [&](memory_kind kind) {
    side s;
    s.kind = kind;
    if (kind == memory_kind::device) s.device = stream.device();
    return s;
  };
  // A DMA between pinned and device memory of the stream's device reads no
  // option: it need not take the engine's lock (nor copy them) for them.
  if (is_direct_kind(dst_kind) && is_direct_kind(src_kind)) {
    static const copy_options unread{};
    return dispatch(dst, side_of(dst_kind), src, side_of(src_kind), bytes, stream, unread);
  }
  return dispatch(dst, side_of(dst_kind), src, side_of(src_kind), bytes, stream, get_copy_options());
}

void detail::copy_known_and_wait(void* dst, memory_kind dst_kind, const void* src, memory_kind src_kind,
                                 std::size_t bytes, stream_view stream) {
  if (bytes == 0) return;
  if (is_direct_kind(dst_kind) && is_direct_kind(src_kind) && !capturing(stream)) {
    enqueue_copy(dst, src, bytes, stream);
    stream.synchronize();
    return;
  }
  copy_async_known(dst, dst_kind, src, src_kind, bytes, stream).wait();
}

bool detail::upload_read_at_return(void* dst, const void* src, std::size_t bytes, stream_view stream) {
  if (bytes == 0 || bytes > read_at_return_upload_limit) return false;
  const device_guard guard{stream.device()};
  auto& backend = detail::backend_for(stream.device());
  if (!backend.pageable_uploads_read_at_return(stream.device().index()) || capturing(stream)) return false;
  thread_local std::array<std::byte, read_at_return_upload_limit> scratch;  // pageable: the driver reads it at once
  std::memcpy(scratch.data(), src, bytes);
  backend.memcpy_async(dst, scratch.data(), bytes, stream.device().index(), stream.native_handle());  // under the guard
  return true;
}

void detail::finish_completed(transfer& t) noexcept { transfer_access::finish_completed(t); }

void detail::check_copy_options(const copy_options& options) { check_options(options); }
detail::copy_side detail::classify_pointer(const void* p, device_kind backend) { return classify(p, backend); }
void detail::check_copy_extent(const void* p, std::size_t bytes, const copy_side& s, const char* which) {
  check_extent(p, bytes, s, which);
}
void detail::check_copy_stream(stream_view stream, const copy_side& dst, const copy_side& src) {
  check_stream(stream, dst, src);
}
transfer detail::copy_sides(void* dst, const copy_side& to, const void* src, const copy_side& from, std::size_t bytes,
                            stream_view stream, const copy_options& options) {
  if (bytes == 0) return {};
  return dispatch(dst, to, src, from, bytes, stream, options);
}
transfer detail::transfer_after(stream_view s, copy_path path) { return transfer_access::make(done_after(s), path); }
transfer detail::transfer_complete(copy_path path) { return transfer_access::make(nullptr, path); }
transfer detail::share_transfer(transfer& t) { return transfer_access::share(t); }
void detail::wait_for_stream(stream_view s) { wait_for(s); }
bool detail::stream_capturing(stream_view s) { return capturing(s); }
stream_view detail::engine_stream_of(device_id device) { return engine_stream(device); }

memory_kind detail::host_memory_kind_for(const void* p, device_kind backend) { return classify(p, backend).kind; }

void copy(void* dst, const void* src, std::size_t bytes, stream_view stream) {
  copy_async(dst, src, bytes, stream).wait();
}

void copy(void* dst, const void* src, std::size_t bytes, stream_view stream, const copy_options& options) {
  copy_async(dst, src, bytes, stream, options).wait();
}

}  // namespace syncmem
