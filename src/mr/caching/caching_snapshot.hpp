#pragma once

// The snapshot of a caching allocator (syncmem/mr/allocator_snapshot.hpp):
// every segment with its blocks, from the bookkeeping as it stands. The
// caller holds the allocator's lock and has taken back the per-thread caches,
// so that cached blocks show as free.

#include <cstddef>
#include <string>

#include "mr/caching/device_segments.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/mr/allocator_snapshot.hpp"

namespace syncmem::mr::detail::caching {

struct snapshot_source {
  device_id owner;  // the streams' device
  std::string device;
  std::string resource;
  std::size_t reserved = 0;
  const device_segments::segment_map* segments = nullptr;
  const segment* growable = nullptr;  // the growable range, if reserved
};

[[nodiscard]] allocator_snapshot take_snapshot(const snapshot_source& source);

}  // namespace syncmem::mr::detail::caching
