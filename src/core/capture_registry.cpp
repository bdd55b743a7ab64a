#include "core/capture_registry.hpp"

#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "syncmem/device_guard.hpp"

namespace syncmem::detail {

namespace {

using stream_key = std::tuple<int, int, const void*>;  // device kind, index, native handle

stream_key key_of(stream_view s) {
  return {static_cast<int>(s.device().kind()), s.device().index(), s.native_handle()};
}

struct external_capture {
  device_id device;
  capture_info info;
  stream_filter covers;
};

struct registry {
  std::mutex mutex;
  std::map<stream_key, capture_info> open;  // by the stream begin_capture was called on
  std::map<std::pair<int, unsigned long long>, stream_key>
      forked;  // by the backend's capture sequence, where it has one
  // By number; shared, so that capture_on can ask a filter outside the lock
  // without copying it.
  std::map<std::uint64_t, std::shared_ptr<const external_capture>> external;
  std::uint64_t next_number = 1;
};

unsigned long long sequence_of(stream_view s) {
  device_guard guard{s.device()};
  graph_capability* const graphs = backend_for(s.device()).graphs();
  return graphs == nullptr ? 0 : graphs->capture_sequence(s.device().index(), s.native_handle());
}

registry& captures() {
  static auto* r = new registry;  // leaked: graphs may be destroyed during static destruction
  return *r;
}

}  // namespace

graph_pool_state::~graph_pool_state() {
  // Released newest first: a block freed during a capture goes back to its
  // resource before that resource's private pool of this graph_pool goes.
  while (!held_.empty()) held_.pop_back();
}

void graph_pool_state::hold(std::shared_ptr<void> what) {
  std::lock_guard lock{mutex_};
  held_.push_back(std::move(what));
}

void capture_began(stream_view s, std::shared_ptr<graph_pool_state> pool) {
  auto& r = captures();
  const unsigned long long sequence = sequence_of(s);
  {
    std::lock_guard lock{r.mutex};
    r.open[key_of(s)] = capture_info{std::move(pool), r.next_number++};
    if (sequence != 0) r.forked[{static_cast<int>(s.device().kind()), sequence}] = key_of(s);
  }
  capture_opened();
}

std::shared_ptr<graph_pool_state> capture_ended(stream_view s) noexcept {
  auto& r = captures();
  std::shared_ptr<graph_pool_state> pool;
  {
    std::lock_guard lock{r.mutex};
    const auto it = r.open.find(key_of(s));
    if (it == r.open.end()) return nullptr;
    pool = std::move(it->second.pool);
    r.open.erase(it);
    std::erase_if(r.forked, [&](const auto& entry) { return entry.second == key_of(s); });
  }
  capture_closed();
  return pool;
}

std::uint64_t external_capture_began(device_id device, std::shared_ptr<graph_pool_state> pool, stream_filter covers) {
  auto& r = captures();
  std::uint64_t number = 0;
  {
    std::lock_guard lock{r.mutex};
    number = r.next_number++;
    r.external.emplace(number, std::make_shared<const external_capture>(
                                   external_capture{device, capture_info{std::move(pool), number}, std::move(covers)}));
  }
  capture_opened();
  return number;
}

void external_capture_ended(std::uint64_t token) noexcept {
  auto& r = captures();
  {
    std::lock_guard lock{r.mutex};
    if (r.external.erase(token) == 0) return;
  }
  capture_closed();
}

std::optional<capture_info> capture_on(stream_view s) {
  if (!captures_open()) return std::nullopt;
  auto& r = captures();
  std::vector<std::shared_ptr<const external_capture>> candidates;
  {
    std::lock_guard lock{r.mutex};
    const auto it = r.open.find(key_of(s));
    if (it != r.open.end()) return it->second;
    for (const auto& [number, capture] : r.external) {
      if (capture->device == s.device()) candidates.push_back(capture);
    }
  }
  // Asked outside the lock: a filter may call into the driver, or back into syncmem.
  for (const auto& capture : candidates) {
    if (capture->covers(s.native_handle())) return capture->info;
  }
  // A stream that a capture has forked to (it waited for an event recorded on a capturing stream).
  const unsigned long long sequence = sequence_of(s);
  if (sequence == 0) return std::nullopt;
  std::lock_guard lock{r.mutex};
  const auto fork = r.forked.find({static_cast<int>(s.device().kind()), sequence});
  if (fork == r.forked.end()) return std::nullopt;
  const auto it = r.open.find(fork->second);
  if (it == r.open.end()) return std::nullopt;
  return it->second;
}

}  // namespace syncmem::detail
