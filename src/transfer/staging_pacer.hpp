#pragma once

// The pacing of the engine's staged copies: how a copy through pinned staging
// is cut into chunks, how many threads copy them, how many chunks are in
// flight at once (a ring of staging buffers), the waits on those buffers (an
// event per buffer, recorded after the DMA that used it), and how the host
// copies of an upload are kept to the speed of the link (threads dropped while
// DMAs queue up, adjacent chunks merged into one DMA). Single staged copies
// (copy_paths.cpp) and the staged ranges of a batch (batch_copy.cpp) are
// paced by it alike. docs/transfers.md, "The staging pipeline", says why each
// part is there; transfer/h2d and batch/ in bench/ measure it.

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <vector>

#include "core/event_pool.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/event.hpp"
#include "syncmem/stream.hpp"
#include "transfer/host_copy_pool.hpp"

namespace syncmem::detail {

// Which staged copies get the engine's two treatments for caches. The library
// always copies with the defaults; tests and the benchmarks that measure the
// treatments (engine-streaming, engine-ordinary in bench/transfers.cpp) pass
// others to copy_async_with.
struct staging_thresholds {
  // Single uploads larger than this write part of their staging with
  // ordinary stores, whose lines a DMA reads from the shared cache, since
  // streaming stores fill memory and slow the DMAs beside them
  // (transfer/h2d-interleaved at 4 and 16 MiB, transfer/h2d against
  // engine-streaming from 64 MiB; bench/results/h200). staging_pacer::
  // upload_stores says which chunks.
  std::size_t ordinary_stores_above = std::size_t{2} << 20;
  // Single uploads with ordinary stores up to this write every chunk after
  // their first two so and demote it; larger ones keep streaming stores for
  // their first five, demote only their last three (upload_stores).
  std::size_t demote_every_ordinary_chunk_up_to = std::size_t{8} << 20;
  // A batch's uploads, larger than this in all, are gathered with ordinary
  // stores and twice the threads (batch_execution.cpp).
  std::size_t batch_ordinary_stores_above = std::size_t{32} << 20;
  // Downloads up to this demote the staging lines they read, which would slow
  // the next download's first DMAs; larger ones, limited by their copy-out,
  // alternate between two rings instead (transfer/d2h, bench/results/h200).
  // Those that copy out with ordinary stores (over 8 MiB) do not demote: the
  // demoting lands on the next download, and back to back they ran 10-50%
  // faster without it (transfer-d2h-demoting.txt).
  std::size_t demote_downloads_up_to = std::size_t{8} << 20;
  // Downloads larger than this, up to ordinary_download_stores_up_to, copy out
  // with ordinary stores and half as many threads again: streaming stores
  // fill memory and slow the DMAs bringing the next chunks in, which these
  // downloads wait for, while the lines ordinary stores leave in the shared
  // cache cost smaller downloads their copy-out and larger ones their DMAs
  // (transfer/d2h at 16 MiB, engine_threads from 4 to 128 MiB;
  // bench/results/h200/transfer-d2h-ordinary-stores.txt).
  std::size_t ordinary_download_stores_above = std::size_t{8} << 20;
  std::size_t ordinary_download_stores_up_to = std::size_t{32} << 20;
};

// The events of a ring's buffers, given back to the pool however the copy
// ends. A slot is always recorded on the same stream, so recording it again
// cannot release a wait queued on its previous record early.
class event_slots {
 public:
  explicit event_slots(std::size_t count) : slots_(count) {}
  ~event_slots();
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

// One staged copy's pacing, on its caller's stack beside its host_copy_pool
// job (made before the job, so that the job's gates outlive it). The caller
// enqueues the DMAs and opens the job's chunks; the pacer says which chunks a
// DMA carries, records the buffers' events and sets the job's threads.
//
// An upload with three buffers or more records an event after every DMA, so
// that it knows whether the last two are still queued: while they are, a
// chunk that is ready goes in one DMA with the next one when that lies right
// after it in the ring (each DMA costs the link about 2 us; single uploads
// only), and the job drops one thread each time a DMA goes in (host copies far
// ahead of the link slow its DMAs); once the latest has completed, the link is
// about to run dry and the job gets every thread back. Uploads with ordinary
// stores keep every thread.
class staging_pacer {
 public:
  using chunk = host_copy_pool::job::chunk;

  // How chunks grow from copy_options::min_chunk to max_chunk: uploads by half
  // (each chunk one and a half times the one before it, rounded up to whole
  // pages), since the host copies a cached source at only about the link's
  // speed and doubling left the link idle while each copy outlasted the DMA
  // before it; copies between devices and a batch's groups by doubling;
  // downloads by doubling, then halving: no chunk takes more than half the
  // bytes left (down to min_chunk), since the copy-out of a download's last
  // chunk follows every DMA, and the host copies a chunk out faster than the
  // link brings in one half its size, so the copy-outs keep up.
  enum class growth { doubling, by_half, doubling_then_halving };

  // Uploads up to this size copy into their staging with half as many threads
  // again as the default, so that one late thread does not hold up the chunk
  // the link waits for (transfer/h2d at 1 MiB, bench/results/h200).
  static constexpr std::size_t more_threads_for_uploads_up_to = std::size_t{4} << 20;
  // Uploads with ordinary stores up to this size copy with twice the default
  // threads: ordinary stores copy slower per thread than streaming ones, and
  // these uploads wait on their host copies (on an H200, 3-16 MiB 1-17%
  // faster than with half as many again, while 24-64 MiB ones ran 2-6%
  // slower; bench/results/h200/transfer-h2d-upload-threads.txt).
  static constexpr std::size_t most_threads_for_uploads_up_to = std::size_t{16} << 20;

  // The size of the chunk after one of `bytes` bytes.
  [[nodiscard]] static std::size_t next_chunk(std::size_t bytes, const copy_options& options, growth g) noexcept;
  // How a staged copy of `bytes` bytes is cut into chunks with `options`;
  // `largest` is set to the largest chunk. Shared with the timeline tool
  // (bench/tuning/transfer_timeline.cpp) and the pinned-chunks benchmarks.
  [[nodiscard]] static std::vector<chunk> plan_chunks(std::size_t bytes, const copy_options& options, growth g,
                                                      std::size_t& largest);
  // The staging buffers, and so the chunks in flight at once, of a copy of
  // `chunks` chunks (or a batch of as many groups).
  [[nodiscard]] static std::size_t ring_buffers(const copy_options& options, std::size_t chunks) noexcept;

  // How many threads, the caller included, copy a staged upload of `bytes`
  // bytes into its staging (upload_threads) or out of it (download_threads):
  // what the options set, else `usual` (the pool's default): twice that for
  // uploads with ordinary stores (larger than
  // staging_thresholds::ordinary_stores_above) up to
  // most_threads_for_uploads_up_to, half as many again for other uploads up
  // to more_threads_for_uploads_up_to or with ordinary stores (with the
  // defaults, every other staged upload) and for downloads that demote or
  // copy out with ordinary stores.
  // Shared with the timeline tool.
  [[nodiscard]] static int upload_threads(std::size_t bytes, const copy_options& options,
                                          const staging_thresholds& thresholds = {},
                                          int usual = host_copy_pool::default_threads()) noexcept;
  // The same for the uploads of a batch, `bytes` of them in all: twice `usual`
  // when they are larger than batch_ordinary_stores_above, half as many again
  // up to more_threads_for_uploads_up_to, else `usual`.
  [[nodiscard]] static int batch_upload_threads(std::size_t bytes, const copy_options& options,
                                                const staging_thresholds& thresholds = {},
                                                int usual = host_copy_pool::default_threads()) noexcept;
  [[nodiscard]] static int download_threads(std::size_t bytes, const copy_options& options,
                                            const staging_thresholds& thresholds = {},
                                            int usual = host_copy_pool::default_threads()) noexcept;
  // Whether a staged download of `bytes` bytes demotes the staging lines it
  // reads. Shared with the timeline tool.
  [[nodiscard]] static bool demotes_download(std::size_t bytes, const staging_thresholds& thresholds = {}) noexcept;
  // Whether a staged download of `bytes` bytes copies out with ordinary
  // stores (host_copy_pool::job::copy_out_with_ordinary_stores). Shared with
  // the timeline tool.
  [[nodiscard]] static bool download_ordinary_stores(std::size_t bytes,
                                                     const staging_thresholds& thresholds = {}) noexcept;

  // Which chunks of a single upload's job get ordinary stores and which are
  // also demoted (host_copy_pool::job::set_stores): none up to
  // ordinary_stores_above; up to demote_every_ordinary_chunk_up_to every
  // chunk after the first two, demoted; above it the chunks after the first
  // five, the last three of them demoted. The first chunks keep streaming
  // stores because the link waits for them (a demoted chunk completes
  // later), the last are demoted because their DMAs follow before the lines
  // leave the writers' caches, and the middle chunks of a long upload skip
  // demoting, which would slow the host copies that limit it.
  struct stores {
    std::size_t ordinary_from;
    std::size_t demoted_from;
  };
  [[nodiscard]] static stores upload_stores(std::size_t bytes, std::size_t chunks,
                                            const staging_thresholds& thresholds = {}) noexcept;

  // A single upload through `buffers` buffers, copied by `threads` threads.
  [[nodiscard]] static staging_pacer upload(std::size_t buffers, int threads, bool ordinary_stores) {
    return staging_pacer{buffers, threads, buffers >= 3, buffers >= 3, buffers >= 3 && !ordinary_stores};
  }
  // The uploads of a batch, a group of ranges in each buffer: no merging.
  [[nodiscard]] static staging_pacer batch_upload(std::size_t buffers, int threads, bool ordinary_stores) {
    const bool paced = buffers >= 3 && !ordinary_stores;
    return staging_pacer{buffers, threads, paced, false, paced};
  }
  // A download, whose host threads wait for each buffer's DMA to land.
  [[nodiscard]] static staging_pacer download(std::size_t buffers) {
    return staging_pacer{buffers, 0, false, false, false};
  }

  staging_pacer(const staging_pacer&) = delete;
  staging_pacer& operator=(const staging_pacer&) = delete;

  [[nodiscard]] std::size_t buffers() const noexcept { return buffers_; }

  // Whether the DMA of chunk `c`, which fills its buffer (`fills_buffer`),
  // also carries chunk c + 1 of the `chunks` (whose buffer follows c's in the
  // ring unless c + 1 starts the ring again): when the next one is done
  // already, or the last two DMAs are both still queued.
  [[nodiscard]] bool carries_next(const host_copy_pool::job& job, std::size_t c, std::size_t chunks,
                                  bool fills_buffer) const {
    const std::size_t next = c + 1;
    const bool adjacent = next < chunks && next % buffers_ != 0 && fills_buffer;
    return merges_ && dmas_ >= 2 && adjacent &&
           (job.finished(next) || (!slots_[previous_[0]].ready() && !slots_[previous_[1]].ready()));
  }
  // A DMA reading buffer `k` (and the next, if it carries two chunks) has
  // been enqueued: sets the job's threads to the link.
  void dma_enqueued(host_copy_pool::job& job, std::size_t k) {
    if (paces_threads_ && dmas_ >= 2) {
      if (slots_[previous_[0]].ready()) {
        job.set_helpers(threads_);  // the link is about to run dry: every thread
      } else if (!slots_[previous_[1]].ready()) {
        job.set_helpers(std::max(1, job.helpers() - 1));  // two DMAs still queued: one thread fewer
      }
    }
    previous_ = {k, previous_[0]};
    ++dmas_;
  }
  // The work enqueued on `s` so far has used buffer `k`: records its event
  // where a later chunk reuses the buffer (`reused`) or the pacing looks at
  // it, and returns it, the gate a chunk reusing the buffer opens behind
  // (nullptr when nothing was recorded).
  const event* buffer_used(std::size_t k, stream_view s, bool reused) {
    if (!tracks_ && !reused) return nullptr;
    slots_.record(k, s);
    return &slots_[k];
  }
  // The event of buffer `k`, recorded by buffer_used.
  [[nodiscard]] const event* gate(std::size_t k) const noexcept { return &slots_[k]; }
  // Every event recorded has been waited for (a download's host threads have
  // waited for all of them): they go back to the pool needing no query.
  void all_completed() noexcept { slots_.all_completed(); }

 private:
  staging_pacer(std::size_t buffers, int threads, bool tracks, bool merges, bool paces_threads)
      : buffers_{buffers},
        threads_{threads},
        tracks_{tracks},
        merges_{merges},
        paces_threads_{paces_threads},
        slots_{buffers} {}

  std::size_t buffers_;
  int threads_;
  bool tracks_;         // an event after every DMA, for the decisions below
  bool merges_;         // carries_next may merge two chunks
  bool paces_threads_;  // dma_enqueued drops and restores threads
  std::size_t dmas_ = 0;
  std::array<std::size_t, 2> previous_{};  // the buffers of the last two DMAs, the latest first
  event_slots slots_;                      // an event per buffer
};

}  // namespace syncmem::detail
