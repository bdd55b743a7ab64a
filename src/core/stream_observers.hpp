#pragma once

// Who wants to know that a stream is about to be destroyed: allocators that
// keep memory freed on a stream, and must stop ordering work after it (a new
// stream may get the same handle). syncmem::stream calls notify before it
// destroys its handle; code that destroys streams of its own (through CUDA
// directly) tells the allocators itself (caching_resource::release_stream).

#include <cstdint>
#include <functional>

#include "syncmem/device_id.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::detail {

using stream_observer = std::function<void(device_id, stream_handle)>;

// Registers `observer`; returns an id for remove_stream_observer.
[[nodiscard]] std::uint64_t add_stream_observer(stream_observer observer);
// Unregisters; when it returns, the observer is not running and will not run.
void remove_stream_observer(std::uint64_t id) noexcept;
// Calls every observer with the stream about to be destroyed. The stream is
// still valid during the calls (events may be recorded on it).
void notify_stream_destroying(device_id device, stream_handle handle) noexcept;

}  // namespace syncmem::detail
