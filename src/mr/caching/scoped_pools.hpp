#pragma once

// The routing of mr::use_pool (include/syncmem/mr/use_pool.hpp): each
// thread's stack of scopes, the resources that belong to pools (never routed
// themselves), and the blocks routed to a pool, so that a free through the
// resource that allocated the block reaches the pool. A caching_resource asks
// here on allocate and deallocate; both ask cheaply while no scope exists on
// the thread or no block is routed.

#include <atomic>
#include <cstddef>

#include "syncmem/device_id.hpp"

namespace syncmem::mr {
class pool;
class caching_resource;
}  // namespace syncmem::mr

namespace syncmem::mr::detail::caching {

// Scopes open on any thread, and blocks routed: what the hot paths test first.
inline std::atomic<int> open_scopes{0};
inline std::atomic<std::size_t> routed_blocks{0};

void push_scope(pool* p);
void pop_scope(pool* p) noexcept;
// The innermost scope's pool for `device` on this thread, or nullptr.
[[nodiscard]] pool* scoped_pool(device_id device) noexcept;

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
