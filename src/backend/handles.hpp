#pragma once

// Opaque handles to what a backend makes and only it can read: each kind of
// object has a type of its own, so that a pool cannot be passed where a graph
// is expected, and no backend's object is mistaken for a CUDA type. Streams and
// events have theirs in the public headers (stream_handle, event_handle),
// since stream_view and event hold them.

#include <cstdint>
#include <type_traits>

#include "syncmem/event.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::detail {

// A stream-ordered memory pool (cudaMemPool_t, or an emulated pool).
enum class pool_handle : std::uintptr_t {};
// An executable graph (cudaGraphExec_t, or an emulated recording).
enum class graph_handle : std::uintptr_t {};
// A node of a graph being captured (cudaGraphNode_t).
enum class capture_node : std::uintptr_t {};
// A physical allocation of the virtual memory API (cuMemCreate's handle, or an
// emulated one); 0 is none.
using physical_handle = unsigned long long;

// A handle for the backend's own pointer, and back, where the backend made it.
template <class Handle, class T>
[[nodiscard]] Handle handle_of(T* p) noexcept {
  static_assert(std::is_enum_v<Handle>);
  return Handle{reinterpret_cast<std::uintptr_t>(p)};
}
template <class Pointer, class Handle>
[[nodiscard]] Pointer pointer_of(Handle h) noexcept {
  static_assert(std::is_pointer_v<Pointer> && std::is_enum_v<Handle>);
  return reinterpret_cast<Pointer>(static_cast<std::uintptr_t>(h));  // NOLINT(performance-no-int-to-ptr)
}

}  // namespace syncmem::detail
