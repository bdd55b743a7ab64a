#include "mr/caching/caching_snapshot.hpp"

#include <algorithm>
#include <ctime>
#include <optional>

#include <fmt/format.h>

#include "mr/caching/labels.hpp"

namespace syncmem::mr::detail::caching {

namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char text[32] = {};
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

std::optional<stream_view> pool_stream(device_id device, const stream_pool* pool) {
  if (pool == nullptr || pool->kind != stream_pool::role::live) return std::nullopt;
  return syncmem::detail::stream_access::make(device, pool->stream);
}

// One block, counted into the snapshot's totals.
allocator_snapshot::block describe(device_id device, const block* b, std::uintptr_t base, allocator_snapshot& snap) {
  allocator_snapshot::block out;
  out.offset = b->ptr - base;
  out.size = b->size;
  switch (b->status) {
    case block_status::allocated:
      out.state = block_state::allocated;
      out.requested = b->requested.load(std::memory_order_relaxed);
      out.label = label_text(b->label.load(std::memory_order_relaxed));
      out.stream = syncmem::detail::stream_access::make(device, b->stream.load(std::memory_order_relaxed));
      snap.allocated += b->size;
      break;
    case block_status::pending:
      out.state = block_state::pending;
      out.stream = pool_stream(device, b->owner);
      snap.pending += b->size;
      break;
    default:
      out.state = block_state::free;
      out.stream = pool_stream(device, b->owner);
      snap.free += b->size;
      break;
  }
  return out;
}

void add_segment(device_id device, const segment& seg, allocator_snapshot& snap) {
  allocator_snapshot::segment out;
  out.address = seg.base;
  out.size = seg.size;
  out.stream = syncmem::detail::stream_access::make(device, seg.stream);
  out.pool = seg.kind == pool_kind::small ? segment_pool::small : segment_pool::large;
  for (const block* b = seg.first; b != nullptr; b = b->next) out.blocks.push_back(describe(device, b, seg.base, snap));
  snap.segments.push_back(std::move(out));
}

// Each run of mapped pages shows as a segment of its own. Pages moved away
// by a growth show where they are now (their old addresses, still mapped
// until earlier work has passed, are not memory of their own).
void add_growable(device_id device, const segment& range, allocator_snapshot& snap) {
  bool in_run = false;
  for (const block* b = range.first; b != nullptr; b = b->next) {
    if (b->status == block_status::unmapped || b->status == block_status::moving) {
      in_run = false;
      continue;
    }
    if (!in_run) {
      allocator_snapshot::segment run;
      run.address = b->ptr;
      run.pool = segment_pool::expandable;
      snap.segments.push_back(std::move(run));
      in_run = true;
    }
    auto& run = snap.segments.back();
    run.blocks.push_back(describe(device, b, run.address, snap));
    run.size += b->size;
  }
}

}  // namespace

allocator_snapshot take_snapshot(const snapshot_source& source) {
  allocator_snapshot snap;
  snap.device = source.device;
  snap.resource = source.resource;
  snap.captured_at = utc_now();
  snap.reserved = source.reserved;
  if (source.segments != nullptr) {
    for (const auto& entry : *source.segments) add_segment(source.owner, *entry.second, snap);
  }
  if (source.growable != nullptr) add_growable(source.owner, *source.growable, snap);
  std::sort(snap.segments.begin(), snap.segments.end(),
            [](const auto& a, const auto& b) { return a.address < b.address; });
  return snap;
}

}  // namespace syncmem::mr::detail::caching
