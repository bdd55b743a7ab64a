#include "core/allocation_router.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "syncmem/device_guard.hpp"

namespace syncmem::detail {

namespace {

using stream_key = std::tuple<int, int, stream_handle>;  // device kind, index, handle

stream_key key_of(stream_view s) { return {static_cast<int>(s.device().kind()), s.device().index(), s.handle()}; }

struct route {
  enum class which : std::uint8_t {
    captured_stream,   // begin_capture's stream, and the streams its capture forked to
    filtered_streams,  // the streams `covers` accepts (an external capture)
    thread,            // the allocations of `thread` (a use_pool scope)
  };
  which kind = which::captured_stream;
  std::uint64_t number = 0;  // unique in the process; a capture's number too
  device_id device = device_id::cuda(0);
  stream_key stream{};
  stream_filter covers;
  std::thread::id thread;
  capture_info capture;      // where captures send their allocations
  mr::pool* pool = nullptr;  // where a scope sends them
  bool on_oom_only = false;
};

struct registry {
  std::mutex mutex;
  // Every route, oldest first; shared, so that find_route can ask a filter
  // outside the lock without copying it.
  std::vector<std::shared_ptr<const route>> routes;
  // Captures by the backend's capture sequence, where it has one: a stream
  // that waited for an event recorded on a capturing stream is captured too.
  std::map<std::pair<int, unsigned long long>, stream_key> forked;
  std::uint64_t next_number = 1;
};

registry& routes() {
  static auto* r = new registry;  // leaked: graphs and pools may go during static destruction
  return *r;
}

// This thread's scopes, and the routes of any thread that filter streams to a
// pool: an allocation with neither skips the lock.
thread_local int thread_scopes = 0;
std::atomic<int> filtered_pool_routes{0};

unsigned long long sequence_of(stream_view s) {
  device_guard guard{s.device()};
  graph_capability* const graphs = backend_for(s.device()).graphs();
  return graphs == nullptr ? 0 : graphs->capture_sequence(s.device().index(), s.handle());
}

std::uint64_t add(registry& r, route x) {
  std::lock_guard lock{r.mutex};
  const std::uint64_t number = r.next_number++;
  x.number = number;
  x.capture.number = number;
  r.routes.push_back(std::make_shared<const route>(std::move(x)));
  open_routes.fetch_add(1, std::memory_order_acq_rel);
  return number;
}

// Removes the first route `match` accepts, under the lock; returns it.
template <class Match>
std::shared_ptr<const route> remove_locked(registry& r, Match match) {
  const auto it = std::find_if(r.routes.begin(), r.routes.end(), [&](const auto& x) { return match(*x); });
  if (it == r.routes.end()) return nullptr;
  auto removed = std::move(*it);
  r.routes.erase(it);
  open_routes.fetch_sub(1, std::memory_order_acq_rel);
  return removed;
}

}  // namespace

// ---- captures ---------------------------------------------------------------------------------------

void capture_began(stream_view s, std::shared_ptr<graph_pool_state> pool) {
  auto& r = routes();
  const unsigned long long sequence = sequence_of(s);
  route x;
  x.kind = route::which::captured_stream;
  x.device = s.device();
  x.stream = key_of(s);
  x.capture.pool = std::move(pool);
  (void)add(r, std::move(x));
  if (sequence != 0) {
    std::lock_guard lock{r.mutex};
    r.forked[{static_cast<int>(s.device().kind()), sequence}] = key_of(s);
  }
  capture_opened();
}

std::shared_ptr<graph_pool_state> capture_ended(stream_view s) noexcept {
  auto& r = routes();
  std::shared_ptr<const route> removed;
  {
    std::lock_guard lock{r.mutex};
    removed = remove_locked(
        r, [&](const route& x) { return x.kind == route::which::captured_stream && x.stream == key_of(s); });
    if (!removed) return nullptr;
    std::erase_if(r.forked, [&](const auto& entry) { return entry.second == key_of(s); });
  }
  capture_closed();
  return removed->capture.pool;
}

std::uint64_t external_capture_began(device_id device, std::shared_ptr<graph_pool_state> pool, stream_filter covers) {
  route x;
  x.kind = route::which::filtered_streams;
  x.device = device;
  x.covers = std::move(covers);
  x.capture.pool = std::move(pool);
  const std::uint64_t number = add(routes(), std::move(x));
  capture_opened();
  return number;
}

void external_capture_ended(std::uint64_t token) noexcept {
  auto& r = routes();
  {
    std::lock_guard lock{r.mutex};
    const auto removed =
        remove_locked(r, [&](const route& x) { return x.kind == route::which::filtered_streams && x.number == token; });
    if (!removed) return;
  }
  capture_closed();
  // The other library ends its capture in the backend before it says so here.
  release_held_after_captures();
}

std::optional<capture_info> capture_on(stream_view s) {
  if (!captures_open()) return std::nullopt;
  auto& r = routes();
  std::vector<std::shared_ptr<const route>> filtered;
  {
    std::lock_guard lock{r.mutex};
    for (const auto& x : r.routes) {
      if (x->kind == route::which::captured_stream && x->stream == key_of(s)) return x->capture;
      if (x->kind == route::which::filtered_streams && x->pool == nullptr && x->device == s.device()) {
        filtered.push_back(x);
      }
    }
  }
  // Asked outside the lock: a filter may call into the driver, or back into syncmem.
  for (const auto& x : filtered) {
    if (x->covers(s.handle())) return x->capture;
  }
  // A stream that a capture has forked to.
  const unsigned long long sequence = sequence_of(s);
  if (sequence == 0) return std::nullopt;
  std::lock_guard lock{r.mutex};
  const auto fork = r.forked.find({static_cast<int>(s.device().kind()), sequence});
  if (fork == r.forked.end()) return std::nullopt;
  for (const auto& x : r.routes) {
    if (x->kind == route::which::captured_stream && x->stream == fork->second) return x->capture;
  }
  return std::nullopt;
}

bool capture_open(std::uint64_t number) {
  if (!captures_open()) return false;
  auto& r = routes();
  std::lock_guard lock{r.mutex};
  return std::any_of(r.routes.begin(), r.routes.end(), [&](const auto& x) {
    const bool capture =
        x->kind == route::which::captured_stream || (x->kind == route::which::filtered_streams && x->pool == nullptr);
    return capture && x->number == number;
  });
}

// ---- scopes -----------------------------------------------------------------------------------------

std::uint64_t add_thread_route(device_id device, mr::pool* pool, bool on_oom_only) {
  route x;
  x.kind = route::which::thread;
  x.device = device;
  x.thread = std::this_thread::get_id();
  x.pool = pool;
  x.on_oom_only = on_oom_only;
  const std::uint64_t number = add(routes(), std::move(x));
  ++thread_scopes;
  return number;
}

bool remove_thread_route(std::uint64_t number) noexcept {
  auto& r = routes();
  std::lock_guard lock{r.mutex};
  const auto self = std::this_thread::get_id();
  // The thread's newest route: the scope that should end now.
  std::uint64_t newest = 0;
  for (const auto& x : r.routes) {
    if (x->kind == route::which::thread && x->thread == self) newest = std::max(newest, x->number);
  }
  const auto removed =
      remove_locked(r, [&](const route& x) { return x.kind == route::which::thread && x.number == number; });
  if (!removed) return true;
  --thread_scopes;
  return newest == number;
}

mr::pool* thread_route(device_id device) noexcept {
  if (thread_scopes == 0) return nullptr;
  auto& r = routes();
  std::lock_guard lock{r.mutex};
  const auto self = std::this_thread::get_id();
  for (auto it = r.routes.rbegin(); it != r.routes.rend(); ++it) {
    const route& x = **it;
    if (x.kind == route::which::thread && x.thread == self && x.device == device) return x.pool;
  }
  return nullptr;
}

// ---- pools of other libraries --------------------------------------------------------------------------

std::uint64_t add_filtered_route(device_id device, stream_filter covers, mr::pool* pool, bool on_oom_only) {
  route x;
  x.kind = route::which::filtered_streams;
  x.device = device;
  x.covers = std::move(covers);
  x.pool = pool;
  x.on_oom_only = on_oom_only;
  const std::uint64_t number = add(routes(), std::move(x));
  filtered_pool_routes.fetch_add(1, std::memory_order_acq_rel);
  return number;
}

void remove_filtered_route(std::uint64_t number) noexcept {
  auto& r = routes();
  std::lock_guard lock{r.mutex};
  const auto removed = remove_locked(r, [&](const route& x) {
    return x.kind == route::which::filtered_streams && x.pool != nullptr && x.number == number;
  });
  if (removed) filtered_pool_routes.fetch_sub(1, std::memory_order_acq_rel);
}

// ---- the one question -------------------------------------------------------------------------------

std::optional<route_match> find_route(stream_view s) {
  if (!routes_open()) return std::nullopt;
  if (auto capture = capture_on(s)) return route_match{std::move(capture), nullptr, false};
  if (thread_scopes == 0 && filtered_pool_routes.load(std::memory_order_acquire) == 0) {
    return std::nullopt;
  }
  // Routes to pools, newest first: this thread's scopes, and filters.
  std::vector<std::shared_ptr<const route>> candidates;
  {
    auto& r = routes();
    std::lock_guard lock{r.mutex};
    const auto self = std::this_thread::get_id();
    for (auto it = r.routes.rbegin(); it != r.routes.rend(); ++it) {
      const route& x = **it;
      if (x.pool == nullptr || x.device != s.device()) continue;
      if (x.kind == route::which::thread && x.thread != self) continue;
      if (x.kind == route::which::thread && candidates.empty()) return route_match{std::nullopt, x.pool, x.on_oom_only};
      candidates.push_back(*it);
    }
  }
  // Filters are asked outside the lock, as capture_on's.
  for (const auto& x : candidates) {
    if (x->kind == route::which::thread || x->covers(s.handle())) {
      return route_match{std::nullopt, x->pool, x->on_oom_only};
    }
  }
  return std::nullopt;
}

}  // namespace syncmem::detail
