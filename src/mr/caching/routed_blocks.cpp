#include "mr/caching/routed_blocks.hpp"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace syncmem::mr::detail::caching {

namespace {

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
