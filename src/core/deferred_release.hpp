#pragma once

// Letting go of external memory in stream order. Borrowed memory comes with a
// keep-alive that may hand the memory back to a stream-ordered pool (PyTorch's
// allocator, cudaFreeAsync, a caching_resource): dropping it while work the
// library enqueued on that memory is still queued lets the memory be reused
// under that work. release_after drops it once that work has completed,
// without blocking the caller.

#include <memory>

#include "syncmem/stream.hpp"

namespace syncmem::detail {

// Drops `keep_alive` once the work enqueued on `s` so far has completed: on a
// thread of the library's, never in the caller. An empty keep-alive is a
// no-op; when no event can be recorded on `s` (the device failed for good,
// or the process is exiting), the work is waited for here instead.
void release_after(stream_view s, std::shared_ptr<void> keep_alive) noexcept;

// Blocks until every keep-alive handed to release_after so far has been dropped.
void drain_deferred_releases() noexcept;

}  // namespace syncmem::detail
