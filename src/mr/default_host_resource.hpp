#pragma once

// The host resources the library allocates from when the caller names none
// (synced_memory's host side, the compat layers). Made on first use and never
// destroyed: buffers may be destroyed after main().

#include "syncmem/device_id.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::mr::detail {

// `kind` is pinned_host or pageable_host; pinned memory is pinned by the
// backend of `backend` (CUDA or emulated).
[[nodiscard]] memory_resource& default_host_resource(memory_kind kind, device_kind backend);

}  // namespace syncmem::mr::detail
