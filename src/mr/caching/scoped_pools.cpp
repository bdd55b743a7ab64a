#include "mr/caching/scoped_pools.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/log.hpp"
#include "syncmem/mr/pool.hpp"

namespace syncmem::mr::detail::caching {

namespace {

thread_local std::vector<pool*> scopes;  // this thread's, innermost last

struct routing {
  std::mutex mutex;
  std::unordered_set<const caching_resource*> pool_resources;
  std::unordered_map<void*, caching_resource*> routed;  // routed_blocks counts them
};

routing& state() {
  static auto* r = new routing;  // leaked: pools may be destroyed during static destruction
  return *r;
}

}  // namespace

void push_scope(pool* p) {
  scopes.push_back(p);
  open_scopes.fetch_add(1);
}

void pop_scope(pool* p) noexcept {
  const auto it = std::find(scopes.rbegin(), scopes.rend(), p);
  if (it == scopes.rend()) return;
  if (it != scopes.rbegin()) {
    syncmem::detail::logger().error(
        "mr::use_pool: a scope of a pool of {} ended before a scope made after it on the same thread; scopes must "
        "end in reverse order",
        to_string(p->device()));
  }
  scopes.erase(std::next(it).base());
  open_scopes.fetch_sub(1);
}

pool* scoped_pool(device_id device) noexcept {
  for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
    if ((*it)->device() == device) return *it;
  }
  return nullptr;
}

void register_pool_resource(const caching_resource* r) {
  auto& s = state();
  std::lock_guard lock{s.mutex};
  s.pool_resources.insert(r);
}

void unregister_pool_resource(const caching_resource* r) noexcept {
  auto& s = state();
  std::lock_guard lock{s.mutex};
  s.pool_resources.erase(r);
}

bool is_pool_resource(const caching_resource* r) noexcept {
  auto& s = state();
  std::lock_guard lock{s.mutex};
  return s.pool_resources.contains(r);
}

void note_routed(void* p, caching_resource* owner) {
  auto& s = state();
  std::lock_guard lock{s.mutex};
  s.routed[p] = owner;
  routed_blocks.store(s.routed.size());
}

caching_resource* routed_owner(const void* p) noexcept {
  auto& s = state();
  if (routed_blocks.load() == 0) return nullptr;
  std::lock_guard lock{s.mutex};
  const auto it = s.routed.find(const_cast<void*>(p));  // NOLINT(cppcoreguidelines-pro-type-const-cast): a key only
  return it == s.routed.end() ? nullptr : it->second;
}

caching_resource* take_routed(void* p) noexcept {
  auto& s = state();
  if (routed_blocks.load() == 0) return nullptr;
  std::lock_guard lock{s.mutex};
  const auto it = s.routed.find(p);
  if (it == s.routed.end()) return nullptr;
  caching_resource* owner = it->second;
  s.routed.erase(it);
  routed_blocks.store(s.routed.size());
  return owner;
}

void forget_routed(const caching_resource* owner) noexcept {
  auto& s = state();
  std::lock_guard lock{s.mutex};
  std::erase_if(s.routed, [owner](const auto& entry) { return entry.second == owner; });
  routed_blocks.store(s.routed.size());
}

}  // namespace syncmem::mr::detail::caching
