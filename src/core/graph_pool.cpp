#include "syncmem/graph_pool.hpp"

#include <atomic>

#include "core/capture_registry.hpp"

namespace syncmem {

namespace {
std::atomic<std::uint64_t> next_pool_id{1};
}  // namespace

graph_pool::graph_pool() : state_{std::make_shared<detail::graph_pool_state>(next_pool_id.fetch_add(1))} {}

std::size_t graph_pool::reserved_bytes() const noexcept { return state_->usage->reserved.load(); }
std::size_t graph_pool::allocated_bytes() const noexcept { return state_->usage->allocated.load(); }
std::uint64_t graph_pool::id() const noexcept { return state_->id; }

}  // namespace syncmem
