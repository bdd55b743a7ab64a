// The batched copy (batch_copy.hpp): many copies in few submissions. Here the
// copies are checked, classified and coalesced; batch_execution.cpp carries
// them out.

#include "syncmem/batch_copy.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "transfer/batch_execution.hpp"
#include "transfer/copy_internal.hpp"

namespace syncmem {

namespace {

using detail::copy_side;
using detail::entry;
using detail::route;

bool is_host(const copy_side& s) { return s.kind == memory_kind::pageable_host || s.kind == memory_kind::pinned_host; }

route route_of(const copy_side& to, const copy_side& from) {
  if (is_host(to) && is_host(from)) return route::host;
  if (to.kind == memory_kind::managed || from.kind == memory_kind::managed) return route::dma;
  if (to.kind == memory_kind::device && from.kind == memory_kind::device) {
    return *to.device == *from.device ? route::dma : route::single;
  }
  if (from.kind == memory_kind::device) return to.kind == memory_kind::pinned_host ? route::dma : route::down;
  return from.kind == memory_kind::pinned_host ? route::dma : route::up;
}

// Whether two ranges of one kind of memory that lie end to end may be copied
// as one: pageable memory always, other memory within one known allocation
// (a copy may not run from one allocation into the next).
bool one_allocation(const copy_side& a, const copy_side& b) {
  if (a.kind != b.kind || a.device != b.device) return false;
  if (a.kind == memory_kind::pageable_host) return true;
  return a.base != nullptr && a.base == b.base;
}

// Appends `e` to `out`, or extends the last entry when `e` continues it on both sides.
void append_coalesced(std::vector<entry>& out, const entry& e) {
  if (!out.empty()) {
    entry& last = out.back();
    if (last.how == e.how && last.dst + last.bytes == e.dst && last.src + last.bytes == e.src &&
        one_allocation(last.to, e.to) && one_allocation(last.from, e.from)) {
      last.bytes += e.bytes;
      return;
    }
  }
  out.push_back(e);
}

// A pointer's side, reusing the last answer while pointers stay within its
// allocation (a batch's ranges usually lie in a few allocations, and asking
// the driver costs more than the copy's own submission).
//
// Pageable memory has no allocation the driver knows, so each of its pointers
// would be asked about again: 0.25 us a query (H100), a driver lock that does
// not scale over threads, and a quarter of a 1,000 x 64 KiB pageable upload.
// Where `guess_pageable`, a pointer in the same 2 MiB window as one the driver
// called pageable is taken as pageable too. That cannot mistake device or
// managed memory: the driver reserves their addresses in whole 2 MiB pages
// that host memory never shares (emulated memory is asked about exactly). It
// can mistake pinned or registered memory in the same window for pageable,
// which only sends that copy through the staging: the same bytes, slower.
// A stream being captured does not guess: pageable copies cannot be captured.
class classifier {
 public:
  classifier(device_kind backend, bool guess_pageable) : backend_{backend}, guess_{guess_pageable} {}
  copy_side operator()(const void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    for (const copy_side& s : recent_) {
      const auto base = reinterpret_cast<std::uintptr_t>(s.base);
      if (s.base != nullptr && a >= base && a - base < s.size) return s;
    }
    if (a / pageable_window == window_ && !detail::known_locally(p)) return {};
    copy_side s = detail::classify_pointer(p, backend_);
    if (s.base != nullptr) {
      recent_[next_] = s;
      next_ = (next_ + 1) % recent_.size();
    } else if (guess_ && s.kind == memory_kind::pageable_host) {
      window_ = a / pageable_window;
    }
    return s;
  }

 private:
  static constexpr std::uintptr_t pageable_window = std::uintptr_t{2} << 20;
  device_kind backend_;
  bool guess_;
  std::array<copy_side, 4> recent_{};
  std::size_t next_ = 0;
  std::uintptr_t window_ = UINTPTR_MAX;  // of the last pointer the driver called pageable
};

// Destinations pairwise disjoint, and disjoint from every source: the copies
// of a batch run in no particular order.
void check_overlaps(std::span<const copy_request> copies) {
  struct range {
    std::uintptr_t begin, end;
    std::size_t index;
  };
  std::vector<range> dsts;
  dsts.reserve(copies.size());
  std::uintptr_t src_low = UINTPTR_MAX, src_high = 0;
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const auto& c = copies[i];
    if (c.bytes == 0) continue;
    const auto d = reinterpret_cast<std::uintptr_t>(c.dst);
    const auto s = reinterpret_cast<std::uintptr_t>(c.src);
    dsts.push_back({d, d + c.bytes, i});
    src_low = std::min(src_low, s);
    src_high = std::max(src_high, s + c.bytes);
  }
  const auto by_begin = [](const range& a, const range& b) { return a.begin < b.begin; };
  if (!std::is_sorted(dsts.begin(), dsts.end(), by_begin)) std::sort(dsts.begin(), dsts.end(), by_begin);
  const auto fail = [&](std::size_t i, std::size_t j, const char* what) {
    const auto& a = copies[i];
    const auto& b = copies[j];
    SYNCMEM_FAIL(
        fmt::format("copy_async (batch): the destination of copy {} [{}, +{}) overlaps the {} of copy {} "
                    "[{}, +{}); nothing was copied",
                    i, a.dst, a.bytes, what, j, std::string_view{what} == "source" ? b.src : b.dst, b.bytes));
  };
  for (std::size_t k = 1; k < dsts.size(); ++k) {
    if (dsts[k].begin < dsts[k - 1].end) {
      fail(std::min(dsts[k - 1].index, dsts[k].index), std::max(dsts[k - 1].index, dsts[k].index), "destination");
    }
  }
  if (dsts.empty() || src_high <= dsts.front().begin || src_low >= dsts.back().end) return;
  // The sources reach among the destinations: look each one up.
  std::vector<std::uintptr_t> ends(dsts.size());
  for (std::size_t k = 0; k < dsts.size(); ++k) ends[k] = dsts[k].end;  // increasing: the ranges are disjoint
  for (std::size_t j = 0; j < copies.size(); ++j) {
    const auto& c = copies[j];
    if (c.bytes == 0) continue;
    const auto s = reinterpret_cast<std::uintptr_t>(c.src);
    const auto k = static_cast<std::size_t>(std::upper_bound(ends.begin(), ends.end(), s) - ends.begin());
    if (k < dsts.size() && dsts[k].begin < s + c.bytes) fail(dsts[k].index, j, "source");
  }
}

}  // namespace

transfer copy_async(std::span<const copy_request> copies, stream_view stream) {
  return copy_async(copies, stream, get_copy_options());
}

transfer copy_async(std::span<const copy_request> copies, stream_view stream, const copy_options& options) {
  detail::check_copy_options(options);
  check_device(stream.device());
  const device_id sd = stream.device();
  const bool captured = detail::stream_capturing(stream);
  classifier classify{sd.kind(), !captured};
  std::vector<entry> entries;
  entries.reserve(copies.size());
  {
    const detail::pointer_queries queries;  // set up once for every pointer of the batch
    for (std::size_t i = 0; i < copies.size(); ++i) {
      const copy_request& c = copies[i];
      if (c.bytes == 0) continue;
      SYNCMEM_EXPECTS(c.dst != nullptr,
                      fmt::format("copy_async (batch): the destination of copy {} is null ({} bytes)", i, c.bytes));
      SYNCMEM_EXPECTS(c.src != nullptr,
                      fmt::format("copy_async (batch): the source of copy {} is null ({} bytes)", i, c.bytes));
      const auto d = reinterpret_cast<std::uintptr_t>(c.dst);
      const auto s = reinterpret_cast<std::uintptr_t>(c.src);
      SYNCMEM_EXPECTS(
          d <= UINTPTR_MAX - c.bytes && s <= UINTPTR_MAX - c.bytes,
          fmt::format("copy_async (batch): a range of copy {} ({} bytes) wraps the address space", i, c.bytes));
      const copy_side to = classify(c.dst);
      const copy_side from = classify(c.src);
      try {
        detail::check_copy_extent(c.dst, c.bytes, to, "destination");
        detail::check_copy_extent(c.src, c.bytes, from, "source");
        const bool managed = to.kind == memory_kind::managed || from.kind == memory_kind::managed;
        const bool on_stream_device =
            (to.device && *to.device == sd) || (from.device && *from.device == sd) || (!to.device && !from.device);
        if (managed || !on_stream_device) detail::check_copy_stream(stream, to, from);
      } catch (const logic_error& e) {
        SYNCMEM_FAIL(fmt::format("copy {} of the batch: {}", i, e.what()));
      }
      append_coalesced(entries, {static_cast<std::byte*>(c.dst), static_cast<const std::byte*>(c.src), c.bytes, to,
                                 from, route_of(to, from), i});
    }
  }
  check_overlaps(copies);
  if (entries.empty()) return {};
  return detail::run_batch(entries, stream, options, captured);
}

void copy(std::span<const copy_request> copies, stream_view stream) { copy_async(copies, stream).wait(); }

void copy(std::span<const copy_request> copies, stream_view stream, const copy_options& options) {
  copy_async(copies, stream, options).wait();
}

transfer detail::copy_batch_known(std::span<const known_copy> copies, stream_view stream) {
  const copy_options options = get_copy_options();
  std::vector<entry> entries;
  entries.reserve(copies.size());
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const known_copy& c = copies[i];
    if (c.bytes == 0) continue;
    copy_side to, from;
    to.kind = c.dst_kind;
    from.kind = c.src_kind;
    if (to.kind == memory_kind::device) to.device = stream.device();
    if (from.kind == memory_kind::device) from.device = stream.device();
    append_coalesced(entries, {static_cast<std::byte*>(c.dst), static_cast<const std::byte*>(c.src), c.bytes, to, from,
                               route_of(to, from), i});
  }
  if (entries.empty()) return {};
  return detail::run_batch(entries, stream, options, detail::stream_capturing(stream));
}

}  // namespace syncmem
