#include "core/event_pool.hpp"
#include "core/ignored_failure.hpp"

#include <array>
#include <cstddef>
#include <optional>
#include <utility>

#include "backend/backend.hpp"

namespace syncmem::detail {

namespace {

// A few CUDA events of each thread, taken and given back without the pool's
// lock: a synced round trip takes one and gives it back, and the lock and the
// map were about 1% of its time (H200). At thread exit they go to the pool;
// events given back later on that thread (by static objects at exit) go to
// the pool too.
thread_local bool thread_events_gone = false;  // trivially destroyed: readable to the thread's end

class thread_events {
 public:
  thread_events() = default;
  thread_events(const thread_events&) = delete;
  thread_events& operator=(const thread_events&) = delete;
  ~thread_events() {
    thread_events_gone = true;
    for (std::size_t i = 0; i < count_; ++i) event_pool::instance().release_completed(std::move(*events_[i]));
  }

  std::optional<event> take(device_id device) noexcept {
    for (std::size_t i = count_; i-- > 0;) {
      if (events_[i]->device() != device) continue;
      std::optional<event> e = std::move(events_[i]);
      --count_;
      if (i != count_) events_[i] = std::move(events_[count_]);  // the last one fills the gap
      events_[count_].reset();
      return e;
    }
    return std::nullopt;
  }

  // Keeps `e` when there is room; otherwise leaves it with the caller.
  bool keep(event& e) noexcept {
    if (count_ == events_.size()) return false;
    events_[count_++].emplace(std::move(e));
    return true;
  }

 private:
  std::array<std::optional<event>, 4> events_;
  std::size_t count_ = 0;
};

// Only such events are worth keeping per thread: they are handed out again at once.
bool reusable_before_completion(device_id device) noexcept {
  return backend_for(device).traits().events_reusable_before_completion;
}

thread_events* this_thread_events() {
  if (thread_events_gone) return nullptr;
  thread_local thread_events events;
  return &events;
}

bool keep_in_thread(event& e) noexcept {
  thread_events* mine = reusable_before_completion(e.device()) ? this_thread_events() : nullptr;
  return mine != nullptr && mine->keep(e);
}

}  // namespace

event_pool& event_pool::instance() {
  static auto* const pool = new event_pool{};  // never destroyed, see the header
  return *pool;
}

event event_pool::acquire(device_id device) {
  if (thread_events* mine = reusable_before_completion(device) ? this_thread_events() : nullptr) {
    if (std::optional<event> e = mine->take(device)) return std::move(*e);
  }
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
      } catch (...) {
        // a failed query: make a new event instead
        log_ignored("asking whether a pooled event has completed");
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
  if (keep_in_thread(e)) return;
  try {
    std::lock_guard lock{mutex_};
    auto& pool = pools_[e.device()];
    // CUDA binds a wait or a query to the record current when it is made, so
    // a CUDA event may be recorded anew at once (asking first whether it has
    // completed was the largest part of a small copy's cost).
    if (reusable_before_completion(e.device())) {
      pool.completed.push_back(std::move(e));
    } else {
      pool.maybe_pending.push_back(std::move(e));
    }
  } catch (...) {
    // out of memory: the event is simply destroyed
    log_ignored("returning an event to the pool");
  }
}

void event_pool::release_completed(event&& e) noexcept {
  if (keep_in_thread(e)) return;
  try {
    std::lock_guard lock{mutex_};
    pools_[e.device()].completed.push_back(std::move(e));
  } catch (...) {
    // out of memory: the event is simply destroyed
    log_ignored("returning a completed event to the pool");
  }
}

}  // namespace syncmem::detail
