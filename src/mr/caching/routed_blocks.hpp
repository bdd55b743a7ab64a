#pragma once

// The blocks that the allocation router (src/core/allocation_router.hpp) sent
// from a caching_resource to a pool, so that a free through the resource that
// allocated the block reaches the pool; and the resources that belong to
// pools, which are never routed themselves. Both ask cheaply while no block is
// routed.

#include <atomic>
#include <cstddef>

namespace syncmem::mr {
class caching_resource;
}  // namespace syncmem::mr

namespace syncmem::mr::detail::caching {

// Blocks routed: what the hot path tests first.
inline std::atomic<std::size_t> routed_blocks{0};

void register_pool_resource(const caching_resource* r);
void unregister_pool_resource(const caching_resource* r) noexcept;
[[nodiscard]] bool is_pool_resource(const caching_resource* r) noexcept;

// A block that a resource handed out from `owner`, a pool's resource.
void note_routed(void* p, caching_resource* owner);
// The pool's resource that `p` was routed to, or nullptr when it was not routed.
[[nodiscard]] caching_resource* routed_owner(const void* p) noexcept;
// The pool's resource that `p` was routed to, forgotten now; nullptr when it was not routed.
[[nodiscard]] caching_resource* take_routed(void* p) noexcept;
// `owner` goes: its blocks are no longer routed.
void forget_routed(const caching_resource* owner) noexcept;

}  // namespace syncmem::mr::detail::caching
