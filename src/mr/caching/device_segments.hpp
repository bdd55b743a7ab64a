#pragma once

// The ordinary segments of a caching allocator: memory taken whole from the
// upstream resource (or the device when there is none), each tiled by blocks,
// and given back whole when all its blocks are free. Not thread-safe: the
// allocator calls it under its lock.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "mr/caching/block.hpp"
#include "mr/caching/reservation.hpp"
#include "mr/caching/segment_observers.hpp"
#include "mr/caching/stream_pools.hpp"
#include "syncmem/device.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::mr::detail::caching {

class device_segments {
 public:
  using segment_map = std::map<std::uintptr_t, std::unique_ptr<segment>>;

  device_segments(device_id device, memory_resource* upstream, reservation& reserved, stream_pools& pools);
  device_segments(const device_segments&) = delete;
  device_segments& operator=(const device_segments&) = delete;

  // A new segment of `size` bytes for `kind`, as one free block of `pool`
  // (out of its index); nullptr when the limit or the device refuses.
  [[nodiscard]] block* grow(pool_kind kind, std::size_t size, stream_pool& pool, stream_view s);
  // The segments whose blocks are all free, largest first.
  [[nodiscard]] std::vector<segment*> idle() const;
  // Gives back an idle segment; returns its size.
  std::size_t drop(segment& seg);
  // Gives back every segment, whatever it holds; for the allocator's destructor.
  void release_all(bool device_alive) noexcept;

  [[nodiscard]] const segment_map& all() const noexcept { return segments_; }

  // Adds an observer and tells it of every segment held now; removes one.
  void observe(std::shared_ptr<segment_observer> observer);
  bool stop_observing(const segment_observer* observer) noexcept { return observers_.remove(observer); }
  // The resource goes: each segment is reported released, then the observers are let go.
  void detach_observers() noexcept;
  // The observers, for the growable range to tell of its pages.
  [[nodiscard]] const segment_observers& observers() const noexcept { return observers_; }

 private:
  [[nodiscard]] void* take(std::size_t size, stream_view s);
  void give(void* p, std::size_t size, stream_view s);

  const device_id device_;
  memory_resource* const upstream_;
  syncmem::detail::backend& backend_;
  const int index_;
  reservation& reserved_;
  stream_pools& pools_;
  segment_map segments_;
  segment_observers observers_;
};

}  // namespace syncmem::mr::detail::caching
