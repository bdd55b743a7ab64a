#include "core/event_pool.hpp"

#include <utility>

namespace syncmem::detail {

event_pool& event_pool::instance() {
  static auto* const pool = new event_pool{};  // never destroyed, see the header
  return *pool;
}

event event_pool::acquire(device_id device) {
  {
    std::lock_guard lock{mutex_};
    auto& pool = pools_[device];
    if (!pool.completed.empty()) {
      event e = std::move(pool.completed.back());
      pool.completed.pop_back();
      return e;
    }
    // Events complete roughly in the order they were given back: the oldest
    // is the one worth asking about.
    if (!pool.maybe_pending.empty()) {
      bool ready = false;
      try {
        ready = pool.maybe_pending.front().ready();
      } catch (...) {  // NOLINT(bugprone-empty-catch): a failed query: make a new event instead
      }
      if (ready) {
        event e = std::move(pool.maybe_pending.front());
        pool.maybe_pending.pop_front();
        return e;
      }
    }
  }
  return event{device};
}

void event_pool::release(event&& e) noexcept {
  try {
    std::lock_guard lock{mutex_};
    auto& pool = pools_[e.device()];
    // CUDA binds a wait or a query to the record current when it is made, so
    // a CUDA event may be recorded anew at once (asking first whether it has
    // completed was the largest part of a small copy's cost).
    if (e.device().kind() == device_kind::cuda) {
      pool.completed.push_back(std::move(e));
    } else {
      pool.maybe_pending.push_back(std::move(e));
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: the event is simply destroyed
  }
}

void event_pool::release_completed(event&& e) noexcept {
  try {
    std::lock_guard lock{mutex_};
    pools_[e.device()].completed.push_back(std::move(e));
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: the event is simply destroyed
  }
}

}  // namespace syncmem::detail
