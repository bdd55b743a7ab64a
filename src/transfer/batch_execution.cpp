// Carrying out a batch of copies (batch_execution.hpp): the routes, the
// submissions, the staging of pageable ranges and the copy kernel.

#include "transfer/batch_execution.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/event_pool.hpp"
#include "syncmem/batch_copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "transfer/copy_internal.hpp"
#include "transfer/host_copy_pool.hpp"
#include "transfer/staging_pacer.hpp"

namespace syncmem::detail {

namespace {

// One staging slot per range that goes through it, in whole cache lines.
constexpr std::size_t slot_alignment = 64;
std::size_t aligned(std::size_t n) { return (n + slot_alignment - 1) / slot_alignment * slot_alignment; }

// A range through the staging: `at` is its offset in the block (downloads)
// or in its group's buffer of the ring (uploads). A range the copy kernel
// may move (below) sits at the offset modulo 16 of its device side, which the
// kernel needs of its two sides.
struct staged {
  std::byte* user;         // the pageable side
  std::byte* device_side;  // the other side (the device or pinned memory)
  std::size_t bytes;
  std::size_t at;
  // Small enough for the copy kernel, and on the stream's device: an upload it
  // may scatter from device scratch, a download it gathers into the staging.
  bool scatterable = false;
  [[nodiscard]] std::size_t skew() const noexcept {
    return scatterable ? reinterpret_cast<std::uintptr_t>(device_side) & 15 : 0;
  }
  [[nodiscard]] std::size_t slot() const noexcept { return aligned(skew() + bytes); }
};

// Whether a kernel on `device` reaches this side of a copy by its pointer:
// the device's own memory, or pinned host memory not tied to another device.
bool addressable(const copy_side& side, device_id device) {
  if (!backend_for(device).traits().has_copy_kernel) return false;
  if (side.kind == memory_kind::device) return side.device && *side.device == device;
  if (side.kind == memory_kind::pinned_host) return !side.device || *side.device == device;
  return false;
}

// Whether a copy goes through the copy kernel rather than a DMA: small,
// both sides addressable, and aligned alike (the kernel moves 16 bytes a load).
bool by_kernel(const void* dst, const void* src, std::size_t bytes, bool both_addressable, const copy_options& o) {
  return both_addressable && bytes <= o.batch_kernel_max_copy &&
         (reinterpret_cast<std::uintptr_t>(dst) & 15) == (reinterpret_cast<std::uintptr_t>(src) & 15);
}

// The ranges of one submission: those for the copy kernel and those for the DMA engines.
struct submission {
  std::vector<void*> dsts, kernel_dsts;
  std::vector<const void*> srcs, kernel_srcs;
  std::vector<std::size_t> sizes, kernel_sizes;

  void add(void* d, const void* from, std::size_t n, bool kernel) {
    (kernel ? kernel_dsts : dsts).push_back(d);
    (kernel ? kernel_srcs : srcs).push_back(from);
    (kernel ? kernel_sizes : sizes).push_back(n);
  }
  void clear() {
    for (auto* v : {&dsts, &kernel_dsts}) v->clear();
    for (auto* v : {&srcs, &kernel_srcs}) v->clear();
    for (auto* v : {&sizes, &kernel_sizes}) v->clear();
  }
};

class batch_runner {
 public:
  explicit batch_runner(stream_view s) : s_{s}, backend_{backend_for(s.device())} {}

  // Enqueues the ranges: the kernel's in a launch per few hundred, the rest
  // in one submission where the backend can.
  void submit(submission& r) {
    device_guard guard{s_.device()};
    const int index = s_.device().index();
    if (!r.kernel_dsts.empty()) {
      if (!unkernelled_ && backend_.copy_kernel_batch(r.kernel_dsts.data(), r.kernel_srcs.data(), r.kernel_sizes.data(),
                                                      r.kernel_dsts.size(), index, s_.handle())) {
        kernel_ = true;
      } else {
        unkernelled_ = true;
        for (std::size_t i = 0; i < r.kernel_dsts.size(); ++i) {
          r.dsts.push_back(r.kernel_dsts[i]);
          r.srcs.push_back(r.kernel_srcs[i]);
          r.sizes.push_back(r.kernel_sizes[i]);
        }
      }
    }
    if (r.dsts.empty()) return;
    dma_ = true;
    if (!looped_ &&
        backend_.memcpy_batch_async(r.dsts.data(), r.srcs.data(), r.sizes.data(), r.dsts.size(), index, s_.handle())) {
      return;
    }
    looped_ = true;
    for (std::size_t i = 0; i < r.dsts.size(); ++i)
      backend_.memcpy_async(r.dsts[i], r.srcs[i], r.sizes[i], index, s_.handle());
  }

  [[nodiscard]] copy_path path() const noexcept {
    if (looped_) return copy_path::batch_loop;
    return kernel_ && !dma_ ? copy_path::batch_kernel : copy_path::batch;
  }

 private:
  stream_view s_;
  backend& backend_;
  bool looped_ = false;       // the DMAs go one by one
  bool unkernelled_ = false;  // the backend has no copy kernel
  bool kernel_ = false;
  bool dma_ = false;
};

// Events recorded after groups of staged ranges, given back however the batch ends.
class group_events {
 public:
  ~group_events() {
    for (auto& e : events_) {
      if (completed_) {
        event_pool::instance().release_completed(std::move(e));
      } else {
        event_pool::instance().release(std::move(e));
      }
    }
  }
  const event* record(stream_view s) {
    events_.push_back(event_pool::instance().acquire(s.device()));
    events_.back().record(s);
    return &events_.back();
  }
  void reserve(std::size_t n) { events_.reserve(n); }
  void all_completed() noexcept { completed_ = true; }

 private:
  std::vector<event> events_;  // reserved up front: the job holds pointers to them
  bool completed_ = false;
};

// A block of memory a batch goes through (its pinned staging, its device
// scratch), taken before anything is enqueued and freed in order on the
// stream after its last use. A block the batch can go without is left empty
// when the resource is out of memory.
class batch_block {
 public:
  enum class needed : bool { always, if_memory_allows };
  batch_block(mr::memory_resource& r, std::size_t bytes, stream_view s, needed how = needed::always)
      : resource_{r}, bytes_{bytes}, s_{s} {
    if (bytes == 0) return;
    try {
      p_ = static_cast<std::byte*>(r.allocate(bytes, s));
    } catch (const out_of_memory&) {
      if (how == needed::always) throw;
    }
  }
  ~batch_block() {
    if (p_ != nullptr) resource_.deallocate(p_, bytes_, s_);
  }
  batch_block(const batch_block&) = delete;
  batch_block& operator=(const batch_block&) = delete;
  [[nodiscard]] std::byte* get() const noexcept { return p_; }
  [[nodiscard]] std::size_t size() const noexcept { return p_ != nullptr ? bytes_ : 0; }

 private:
  mr::memory_resource& resource_;
  std::size_t bytes_;
  stream_view s_;
  std::byte* p_ = nullptr;
};

// Uploads of at most this many bytes (and batch_kernel_max_copy) from
// pageable memory land in device scratch memory, a group in one DMA, and the
// copy kernel scatters them: a DMA costs about a microsecond whatever its
// size. On an H100, 1,000 uploads of 4 KiB went up 1.7 times as fast so; of
// 64 KiB no faster, of 256 KiB slower (the DMAs wait for the host threads).
constexpr std::size_t scatter_max_copy = std::size_t{16} << 10;

// The device scratch a batch takes at most, as much as one staging block
// holds: groups beyond it reuse it once the kernels that read it are
// submitted, which run before the DMAs that overwrite it (stream order).
constexpr std::size_t max_scratch = max_batch_staging;

// A large batch of uploads gathers its first this many bytes with streaming
// stores and its last this many demoted, its middle with ordinary stores.
constexpr std::size_t streaming_head_bytes = std::size_t{6} << 20;
constexpr std::size_t demoted_tail_bytes = std::size_t{12} << 20;

// Whether a group of uploads goes up through the device scratch (when there
// is one): two or more, all of them scatterable.
bool scattered(std::span<const staged> group) {
  return group.size() >= 2 && std::all_of(group.begin(), group.end(), [](const staged& r) { return r.scatterable; });
}

// Groups of consecutive staged ranges, growing from min_chunk to max_chunk
// bytes, so that the first DMA starts early and later ones are few.
std::vector<std::size_t> group_ends(const std::vector<staged>& ranges, const copy_options& o) {
  std::vector<std::size_t> ends;
  std::size_t limit = o.min_chunk;
  std::size_t in_group = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    in_group += ranges[i].bytes;
    if (in_group >= limit || i + 1 == ranges.size()) {
      ends.push_back(i + 1);
      in_group = 0;
      limit = staging_pacer::next_chunk(limit, o, staging_pacer::growth::doubling);
    }
  }
  return ends;
}

// The uploads of a batch laid out for a ring of `buffers` pinned buffers of
// `buffer_bytes` each: group g goes through buffer g % buffers, each of its
// ranges at `at` in that buffer (the first at its skew).
struct upload_plan {
  std::vector<staged> ranges;
  std::vector<std::size_t> ends;  // one past each group's last range
  std::size_t buffer_bytes = 0;   // the slots of the largest group
  std::size_t buffers = 0;
  std::size_t scattered_bytes = 0;  // the device scratch that every scattered group takes, side by side

  [[nodiscard]] std::size_t groups() const noexcept { return ends.size(); }
  [[nodiscard]] std::size_t first(std::size_t g) const noexcept { return g == 0 ? 0 : ends[g - 1]; }
  [[nodiscard]] std::span<const staged> group(std::size_t g) const noexcept {
    return {ranges.data() + first(g), ends[g] - first(g)};
  }
};

// The device scratch a scattered group takes: from its buffer's start to its
// last byte, in whole cache lines, so that the next group's ranges keep their
// offsets modulo 16 there too.
std::size_t scratch_span(std::span<const staged> group) { return aligned(group.back().at + group.back().bytes); }

// Groups as group_ends makes them, also cut where the next range would not
// fit one buffer of aligned(max_chunk + 15) bytes, which holds any range
// alone (add_staged cut them to max_chunk; a skew adds at most 15 bytes).
upload_plan plan_uploads(std::vector<staged> up, const copy_options& o) {
  upload_plan p;
  p.ranges = std::move(up);
  const std::size_t most = aligned(o.max_chunk + 15);
  std::size_t limit = o.min_chunk;
  std::size_t in_group = 0;
  std::size_t used = 0;  // the group's slots so far
  const auto close = [&](std::size_t end) {
    p.ends.push_back(end);
    p.buffer_bytes = std::max(p.buffer_bytes, used);
    in_group = 0;
    used = 0;
    limit = staging_pacer::next_chunk(limit, o, staging_pacer::growth::doubling);
  };
  for (std::size_t i = 0; i < p.ranges.size(); ++i) {
    staged& r = p.ranges[i];
    if (used + r.slot() > most) close(i);
    r.at = used + r.skew();
    used += r.slot();
    in_group += r.bytes;
    if (in_group >= limit || i + 1 == p.ranges.size()) close(i + 1);
  }
  p.buffers = staging_pacer::ring_buffers(o, p.groups());
  for (std::size_t g = 0; g < p.groups(); ++g) {
    if (scattered(p.group(g))) p.scattered_bytes += scratch_span(p.group(g));
  }
  return p;
}

// The next submission of a batch, built range by range and then flushed.
class submitter {
 public:
  submitter(batch_runner& runner, stream_view s, const copy_options& o) : runner_{runner}, s_{s}, o_{o} {}

  // Staged copies stay with the DMA engines (they move groups of up to
  // max_chunk through the staging, where the kernel was slower, bench batch/),
  // except small downloads from the stream's device, which the kernel writes
  // into the pinned staging: a DMA costs about a microsecond whatever its size.
  void add_staged(void* d, const void* from, std::size_t n) { next_.add(d, from, n, false); }
  void add_gathered(const staged& r, std::byte* staging) {
    next_.add(staging, r.device_side, r.bytes,
              r.scatterable && by_kernel(staging, r.device_side, r.bytes, addressable_staging(), o_));
  }
  void add_direct(const entry& e) {
    const bool both_addressable = addressable(e.to, s_.device()) && addressable(e.from, s_.device());
    next_.add(e.dst, e.src, e.bytes, by_kernel(e.dst, e.src, e.bytes, both_addressable, o_));
  }
  void flush() {
    runner_.submit(next_);
    next_.clear();
  }
  [[nodiscard]] batch_runner& runner() noexcept { return runner_; }

 private:
  // The staging is pinned memory of the stream's backend: the kernel reaches it where there is one.
  [[nodiscard]] bool addressable_staging() const { return backend_for(s_.device()).traits().has_copy_kernel; }

  batch_runner& runner_;
  stream_view s_;
  const copy_options& o_;
  submission next_;
};

// Downloads of one round come down into the block group by group, an event
// after each; the direct copies go in the first submission (alone when there
// are no downloads). Returns the event each range waits for.
std::vector<const event*> send_downloads(submitter& out, std::byte* block, const std::vector<staged>& down,
                                         std::span<const entry> direct, group_events& landed, stream_view s,
                                         const copy_options& o) {
  std::vector<const event*> gate_of(down.size(), nullptr);
  const auto ends = group_ends(down, o);
  landed.reserve(ends.size());
  std::size_t begin = 0;
  for (const std::size_t end : ends) {
    for (std::size_t i = begin; i < end; ++i) out.add_gathered(down[i], block + down[i].at);
    if (begin == 0) {
      for (const entry& e : direct) out.add_direct(e);
    }
    out.flush();
    const event* gate = landed.record(s);
    std::fill(gate_of.begin() + static_cast<std::ptrdiff_t>(begin), gate_of.begin() + static_cast<std::ptrdiff_t>(end),
              gate);
    begin = end;
  }
  if (down.empty()) {
    for (const entry& e : direct) out.add_direct(e);
    out.flush();
  }
  return gate_of;
}

// The host threads scatter a round's downloads out of the block as their groups land.
void copy_out_downloads(std::byte* block, const std::vector<staged>& down, const std::vector<const event*>& gate_of,
                        const copy_options& o) {
  if (down.empty()) return;
  std::vector<host_copy_pool::job::chunk> chunks;
  chunks.reserve(down.size());
  std::size_t total = 0;
  for (const staged& r : down) {
    chunks.push_back({r.at, r.bytes});
    total += r.bytes;
  }
  const int threads = staging_pacer::download_threads(total, o);
  host_copy_pool::job job{
      host_copy_pool::instance(), host_copy_pool::job::direction::from_staging, nullptr, nullptr, chunks, threads};
  // The ranges of a group land behind one event, recorded once: one wait for them all.
  for (std::size_t i = 0; i < down.size(); ++i) {
    if (i > 0 && gate_of[i] != nullptr && gate_of[i] == gate_of[i - 1]) {
      job.open_behind_previous(i, block + down[i].at, down[i].user);
    } else {
      job.open(i, block + down[i].at, gate_of[i], down[i].user);
    }
  }
  for (std::size_t i = 0; i < down.size(); ++i) job.finish(i);
}

// A large batch of uploads writes its staging as a large single upload does
// (staged_to_device): streaming stores fill memory beside the DMAs reading
// the ranges gathered before, and slow them. The first ranges stream (the
// link waits for them), the middle ones get ordinary stores, the last are
// demoted.
void set_upload_stores(host_copy_pool::job& job, const std::vector<host_copy_pool::job::chunk>& chunks) {
  std::size_t from = 0;
  for (std::size_t head = 0; from < chunks.size() && head < streaming_head_bytes; ++from) head += chunks[from].bytes;
  std::size_t to = chunks.size();
  for (std::size_t tail = 0; to > from && tail < demoted_tail_bytes; --to) tail += chunks[to - 1].bytes;
  job.set_stores(from, to);
  note_ordinary_store_upload();
}

// Uploads go through a ring of pinned buffers, as a large single upload does
// (staged_to_device), so that the few buffers reused stay in the host's
// caches: the host threads gather group g into buffer g % count once the DMA
// of group g - count has read it (each group's ranges open behind that
// group's event), and each group goes up as soon as it is gathered. A group
// of small ones goes in one DMA into the device scratch, at a running offset
// that starts over (after the kernels that read the scratch are submitted)
// where the next group would not fit; the copy kernel scatters them after the
// last DMA, so that the kernels hold up no DMA behind them on the stream.
//
// One event per buffer, recorded after its group's DMA, each group's ranges
// behind one wait for it (an event synchronisation costs microseconds); the
// host threads are paced to the link as a single upload's are (staging_pacer).
void send_uploads(submitter& out, const upload_plan& p, std::byte* ring, const batch_block& scratch, stream_view s,
                  const copy_options& o) {
  if (p.ranges.empty()) return;
  std::vector<host_copy_pool::job::chunk> chunks;
  chunks.reserve(p.ranges.size());
  std::size_t total = 0;
  for (const staged& r : p.ranges) {
    chunks.push_back({total, r.bytes});
    total += r.bytes;
  }
  const int threads = staging_pacer::batch_upload_threads(total, o);
  host_copy_pool::instance().wake(threads);
  const bool ordinary = total > staging_thresholds{}.batch_ordinary_stores_above;
  const std::size_t count = p.buffers;
  auto pacer = staging_pacer::batch_upload(count, threads, ordinary);  // before the job: its gates outlive it
  host_copy_pool::job job{
      host_copy_pool::instance(), host_copy_pool::job::direction::to_staging, nullptr, nullptr, chunks, threads};
  if (ordinary) set_upload_stores(job, chunks);
  const auto buffer = [&](std::size_t g) { return ring + g % count * p.buffer_bytes; };
  const auto open = [&](std::size_t g, const event* gate) {
    job.open(p.first(g), buffer(g) + p.ranges[p.first(g)].at, gate, p.ranges[p.first(g)].user);
    for (std::size_t i = p.first(g) + 1; i < p.ends[g]; ++i) {
      job.open_behind_previous(i, buffer(g) + p.ranges[i].at, p.ranges[i].user);
    }
  };
  for (std::size_t g = 0; g < count; ++g) open(g, nullptr);
  submission scatter;
  std::size_t scratch_at = 0;
  for (std::size_t g = 0; g < p.groups(); ++g) {
    const auto group = p.group(g);
    for (std::size_t i = p.first(g); i < p.ends[g]; ++i) job.finish(i);
    if (scratch.get() != nullptr && scattered(group)) {
      if (scratch_at + scratch_span(group) > scratch.size()) {
        out.runner().submit(scatter);
        scatter.clear();
        scratch_at = 0;
      }
      std::byte* to = scratch.get() + scratch_at;
      out.add_staged(to, buffer(g), group.back().at + group.back().bytes);
      for (const staged& r : group) scatter.add(r.device_side, to + r.at, r.bytes, true);
      scratch_at += scratch_span(group);
    } else {
      for (const staged& r : group) out.add_staged(r.device_side, buffer(g) + r.at, r.bytes);
    }
    out.flush();
    pacer.dma_enqueued(job, g % count);
    const bool reused = g + count < p.groups();
    const event* read = pacer.buffer_used(g % count, s, reused);
    if (reused) open(g + count, read);
  }
  out.runner().submit(scatter);
}

// Cuts a staged range into pieces of at most max_chunk bytes, so that every
// piece fits a round of downloads or a buffer of the uploads' ring, and
// groups stay even.
void add_staged(std::vector<staged>& out, std::byte* user, std::byte* other, std::size_t bytes, std::size_t most,
                std::size_t scatter_max = 0) {
  for (std::size_t at = 0; at < bytes; at += most) {
    const std::size_t n = std::min(most, bytes - at);
    out.push_back({user + at, other + at, n, 0, n <= scatter_max});
  }
}

}  // namespace

transfer run_batch(std::vector<entry>& entries, stream_view s, const copy_options& o, bool captured) {
  const device_id device = s.device();
  auto& backend = backend_for(device);
  if (captured) {
    // The batch API cannot be captured, nor can the host threads' work: each
    // copy becomes a graph node of its own, and what needs a host thread is
    // refused before anything is captured.
    for (const entry& e : entries) {
      if (e.how != route::dma) {
        SYNCMEM_UNSUPPORTED(fmt::format(
            "copy_async (batch): copy {} ({} bytes, {} to {}) cannot be captured into a CUDA graph: only copies "
            "between pinned host, device and managed memory of the stream's device can; nothing was captured",
            e.index, e.bytes, to_string(e.from.kind), to_string(e.to.kind)));
      }
    }
    device_guard guard{device};
    for (const entry& e : entries) backend.memcpy_async(e.dst, e.src, e.bytes, device.index(), s.handle());
    // Nothing runs before the graph is launched: there is nothing to wait for.
    return transfer_complete(copy_path::batch_loop);
  }
  std::vector<entry> direct;
  std::vector<staged> up;
  std::vector<staged> down;
  bool host_side = false;
  for (entry& e : entries) {
    switch (e.how) {
      case route::dma:
        direct.push_back(e);
        break;
      case route::up:
        add_staged(up, const_cast<std::byte*>(e.src), e.dst, e.bytes, o.max_chunk,
                   e.to.kind == memory_kind::device && e.to.device == device
                       ? std::min(o.batch_kernel_max_copy, scatter_max_copy)
                       : 0);
        break;
      case route::down:
        add_staged(down, e.dst, const_cast<std::byte*>(e.src), e.bytes, o.max_chunk,
                   e.from.kind == memory_kind::device && e.from.device == device ? o.batch_kernel_max_copy : 0);
        break;
      case route::host:
        host_side = true;
        break;
      case route::single:
        break;
    }
  }
  // Downloads go through one block in rounds of as many as fit it, uploads
  // through a ring of buffers; all of it is taken before anything is enqueued.
  std::size_t down_total = 0;
  for (const staged& r : down) down_total += r.slot();
  // (a range is at most max_chunk bytes, and its skew at most 15 more: the block holds any one alone)
  const std::size_t block_bytes = std::min(down_total, std::max(max_batch_staging, aligned(o.max_chunk + 15)));
  const upload_plan plan = plan_uploads(std::move(up), o);
  mr::caching_pinned_resource& resource = o.staging != nullptr ? *o.staging : staging_resource(device.kind());
  const batch_block block{resource, block_bytes, s};
  const batch_block ring{resource, plan.buffers * plan.buffer_bytes, s};
  // The scratch is taken only where the small uploads are at least half the bytes uploaded.
  std::size_t up_total = 0, scattered_total = 0, scatterable = 0;
  for (const staged& r : plan.ranges) {
    up_total += r.slot();
    if (r.scatterable) {
      scattered_total += r.slot();
      ++scatterable;
    }
  }
  const bool scatters = scatterable >= 2 && 2 * scattered_total >= up_total;
  const std::size_t scratch_bytes = std::min(plan.scattered_bytes, std::max(max_scratch, plan.buffer_bytes));
  const batch_block scratch{mr::get_per_device_resource(device), scatters ? scratch_bytes : 0, s,
                            batch_block::needed::if_memory_allows};

  if (host_side || !plan.ranges.empty()) wait_for_stream(s);  // (a): host threads read or write host memory
  for (const entry& e : entries) {
    if (e.how == route::host) {
      host_copy_pool::instance().copy(e.dst, e.src, e.bytes,
                                      o.host_threads > 0 ? o.host_threads : host_copy_pool::default_threads());
    }
  }
  batch_runner runner{s};
  submitter out{runner, s, o};
  // Each round's downloads are out of the block, their DMAs waited for,
  // before the next round's go in: the rounds need no other wait.
  std::size_t next_down = 0;
  bool first_round = true;
  while (first_round || next_down < down.size()) {
    std::vector<staged> round;
    for (std::size_t used = 0; next_down < down.size() && used + down[next_down].slot() <= block_bytes; ++next_down) {
      round.push_back(down[next_down]);
      round.back().at = used + down[next_down].skew();
      used += down[next_down].slot();
    }
    group_events landed;
    const auto gates =
        send_downloads(out, block.get(), round, first_round ? direct : std::span<const entry>{}, landed, s, o);
    if (first_round) send_uploads(out, plan, ring.get(), scratch, s, o);  // while the first downloads come down
    copy_out_downloads(block.get(), round, gates, o);
    landed.all_completed();
    first_round = false;
  }
  for (const entry& e : entries) {
    if (e.how == route::single) (void)copy_sides(e.dst, e.to, e.src, e.from, e.bytes, s, o);
  }
  const copy_path path = runner.path();
  if (direct.empty() && plan.ranges.empty() && down.empty() &&
      std::none_of(entries.begin(), entries.end(), [](const entry& e) { return e.how == route::single; })) {
    return transfer_complete(path);  // host to host alone: done
  }
  return transfer_after(s, path);
}

}  // namespace syncmem::detail
