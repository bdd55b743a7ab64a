#include "core/capture_registry.hpp"

#include <mutex>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/ignored_failure.hpp"

namespace syncmem::detail {

graph_pool_state::~graph_pool_state() {
  // Released newest first: a block freed during a capture goes back to its
  // resource before that resource's private pool of this graph_pool goes.
  while (!held_.empty()) held_.pop_back();
}

void graph_pool_state::hold(std::shared_ptr<void> what) {
  std::lock_guard lock{mutex_};
  held_.push_back(std::move(what));
}

namespace {

struct after_captures {
  std::mutex mutex;
  std::vector<std::shared_ptr<void>> held;
};

after_captures& waiting() {
  static auto* w = new after_captures;  // leaked: pools may go during static destruction
  return *w;
}

}  // namespace

void release_after_captures(std::shared_ptr<void> what) noexcept {
  if (what == nullptr) return;
  if (captures_open()) {
    auto& w = waiting();
    try {
      // Tested again under the lock, which release_held_after_captures takes
      // after the count fell: nothing is left behind by a capture that just ended.
      std::lock_guard lock{w.mutex};
      if (captures_open()) {
        w.held.push_back(std::move(what));
        return;
      }
    } catch (...) {
      log_ignored("keeping a pool until the captures end");  // no memory: it goes now
    }
  }
  what.reset();
}

void release_held_after_captures() noexcept {
  if (captures_open()) return;
  std::vector<std::shared_ptr<void>> dropped;
  {
    auto& w = waiting();
    std::lock_guard lock{w.mutex};
    if (captures_open()) return;
    dropped.swap(w.held);
  }
  while (!dropped.empty()) dropped.pop_back();  // newest first, as graph_pool_state releases
}

}  // namespace syncmem::detail
