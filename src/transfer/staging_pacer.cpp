#include "transfer/staging_pacer.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <utility>
#include <vector>

#include "core/event_pool.hpp"

namespace syncmem::detail {

event_slots::~event_slots() {
  for (auto& e : slots_) {
    if (!e) continue;
    if (completed_) {
      event_pool::instance().release_completed(std::move(*e));
    } else {
      event_pool::instance().release(std::move(*e));
    }
  }
}

namespace {
constexpr std::size_t page = 4096;
std::size_t whole_pages(std::size_t n) { return (n + page - 1) / page * page; }

// One and a half times `n`, rounded up to whole pages, at most `most`.
std::size_t grow_by_half(std::size_t n, std::size_t most) {
  constexpr std::size_t largest_safe = (std::numeric_limits<std::size_t>::max() - page) / 3 * 2;
  if (n >= most || n >= largest_safe) return most;
  return std::min(most, whole_pages(n + n / 2));
}
}  // namespace

std::size_t staging_pacer::next_chunk(std::size_t bytes, const copy_options& o, growth g) noexcept {
  if (g == growth::by_half) return grow_by_half(bytes, o.max_chunk);
  return bytes > o.max_chunk / 2 ? o.max_chunk : bytes * 2;
}

// Chunks that start at min_chunk and grow up to max_chunk; with
// doubling_then_halving, at most half of what is left (whole pages), down to
// min_chunk, and never less than min_chunk left after one: then the rest, or
// all of it but min_chunk when the rest is more than max_chunk.
std::vector<staging_pacer::chunk> staging_pacer::plan_chunks(std::size_t bytes, const copy_options& o, growth g,
                                                             std::size_t& largest) {
  const std::size_t tail_floor = std::max<std::size_t>(o.min_chunk, 1);
  std::vector<chunk> chunks;
  largest = 0;
  std::size_t next = o.min_chunk;
  for (std::size_t offset = 0; offset < bytes;) {
    const std::size_t left = bytes - offset;
    std::size_t n = std::min(next, left);
    if (g == growth::doubling_then_halving) {
      n = std::min(n, std::max(whole_pages(left / 2), tail_floor));
      if (left - n < tail_floor) n = left <= o.max_chunk ? left : left - tail_floor;
    }
    chunks.push_back({offset, n});
    largest = std::max(largest, n);
    offset += n;
    next = next_chunk(next, o, g);
  }
  return chunks;
}

std::size_t staging_pacer::ring_buffers(const copy_options& o, std::size_t chunks) noexcept {
  return std::min(static_cast<std::size_t>(o.staging_buffers), chunks);
}

staging_pacer::stores staging_pacer::upload_stores(std::size_t bytes, std::size_t chunks,
                                                   const staging_thresholds& t) noexcept {
  constexpr std::size_t short_streaming_head = 2;
  constexpr std::size_t streaming_head = 5;
  constexpr std::size_t demoted_tail = 3;
  if (bytes <= t.ordinary_stores_above) return {chunks, chunks};
  if (bytes <= t.demote_every_ordinary_chunk_up_to) {
    const std::size_t from = std::min(chunks, short_streaming_head);
    return {from, from};
  }
  const std::size_t from = std::min(chunks, streaming_head);
  return {from, chunks - std::min(chunks - from, demoted_tail)};
}

bool staging_pacer::demotes_download(std::size_t bytes, const staging_thresholds& t) noexcept {
  return bytes <= t.demote_downloads_up_to;
}

// Short uploads, uploads with ordinary stores, and downloads that demote or
// copy out with ordinary stores copy with half as many threads again as the
// default (see staged_to_device and staged_to_host in copy_paths.cpp), unless
// the options set a number: at most three quarters of the cores; uploads with
// ordinary stores up to 16 MiB with twice the default, every core of a
// machine of up to 16.
int staging_pacer::upload_threads(std::size_t bytes, const copy_options& o, const staging_thresholds& t,
                                  int usual) noexcept {
  if (o.host_threads > 0) return o.host_threads;
  const bool ordinary = bytes > t.ordinary_stores_above;
  if (ordinary && bytes <= most_threads_for_uploads_up_to) return usual * 2;
  return bytes <= more_threads_for_uploads_up_to || ordinary ? usual * 3 / 2 : usual;
}

// A batch's uploads larger than that gather their many ranges with every
// thread the pool may have (twice the default: every core of a machine of up
// to 16), as their host side, not the link, limits them (docs/transfers.md).
int staging_pacer::batch_upload_threads(std::size_t bytes, const copy_options& o, const staging_thresholds& t,
                                        int usual) noexcept {
  if (o.host_threads > 0) return o.host_threads;
  if (bytes > t.batch_ordinary_stores_above) return usual * 2;
  return bytes <= more_threads_for_uploads_up_to ? usual * 3 / 2 : usual;
}

int staging_pacer::download_threads(std::size_t bytes, const copy_options& o, const staging_thresholds& t,
                                    int usual) noexcept {
  if (o.host_threads > 0) return o.host_threads;
  return demotes_download(bytes, t) || download_ordinary_stores(bytes, t) ? usual * 3 / 2 : usual;
}

bool staging_pacer::download_ordinary_stores(std::size_t bytes, const staging_thresholds& t) noexcept {
  return bytes > t.ordinary_download_stores_above && bytes <= t.ordinary_download_stores_up_to;
}

}  // namespace syncmem::detail
