#include "core/deferred_release.hpp"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "core/release_at_exit.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/event.hpp"

namespace syncmem::detail {
namespace {

struct pending {
  event done;
  std::shared_ptr<void> keep_alive;
};

// One thread waits on the events in the order they were recorded and drops
// each keep-alive after its event. Its events sleep while they wait
// (blocking_sync) so that it takes no core from the transfer engine.
class releaser {
 public:
  static releaser& instance() {
    static auto* const r = new releaser{};  // never destroyed: buffers may die after main()
    return *r;
  }

  void push(stream_view s, std::shared_ptr<void> keep_alive) {
    std::unique_lock lock{mutex_};
    if (stopped_) {  // exiting: no thread to hand it to, and the runtime may be gone already
      lock.unlock();
      try {
        s.synchronize();
      } catch (...) {
        // a device that is gone runs nothing more
        log_ignored("waiting for a stream at exit before a release");
      }
      return;
    }
    event e = take_event(s.device());
    lock.unlock();
    {
      device_guard guard{s.device()};
      e.record(s);
    }
    lock.lock();
    queue_.push_back({std::move(e), std::move(keep_alive)});
    ++pushed_;
    start_locked();
    wake_.notify_all();
  }

  void drain() {
    std::unique_lock lock{mutex_};
    const std::uint64_t target = pushed_;
    drained_.wait(lock, [&] { return released_ >= target || !worker_.joinable(); });
  }

 private:
  releaser() = default;

  event take_event(device_id d) {
    auto& spare = spare_[d];
    if (spare.empty()) return event{d, {.blocking_sync = true}};
    event e = std::move(spare.back());
    spare.pop_back();
    return e;
  }

  void start_locked() {
    if (worker_.joinable()) return;
    worker_ = std::thread{[this] { run(); }};
    release_at_exit([this] { stop(); });
  }

  void run() {
    std::unique_lock lock{mutex_};
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      pending p = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      try {
        p.done.synchronize();
      } catch (const std::exception& e) {
        report_failure(e, "waiting to release borrowed memory failed: {}", e.what());
      }
      p.keep_alive.reset();  // outside the lock: it may call back into syncmem
      lock.lock();
      spare_[p.done.device()].push_back(std::move(p.done));
      ++released_;
      drained_.notify_all();
    }
  }

  // At exit, while the CUDA runtime is still up: let everything queued go, then stop.
  void stop() {
    std::thread worker;
    {
      std::lock_guard lock{mutex_};
      stopping_ = true;
      stopped_ = true;
      wake_.notify_all();
      worker = std::move(worker_);
    }
    if (worker.joinable()) worker.join();
    std::lock_guard lock{mutex_};
    spare_.clear();
    drained_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable drained_;
  std::deque<pending> queue_;
  std::map<device_id, std::vector<event>> spare_;
  std::thread worker_;
  std::uint64_t pushed_ = 0;
  std::uint64_t released_ = 0;
  bool stopping_ = false;
  bool stopped_ = false;
};

}  // namespace

void release_after(stream_view s, std::shared_ptr<void> keep_alive) noexcept {
  if (!keep_alive) return;
  try {
    releaser::instance().push(s, std::move(keep_alive));
  } catch (const std::exception& e) {
    // No event could be recorded: the device failed for good, so nothing runs on it any more.
    report_failure(e, "ordering the release of borrowed memory failed, released at once: {}", e.what());
  }
}

void drain_deferred_releases() noexcept {
  try {
    releaser::instance().drain();
  } catch (...) {
    // a lock that fails leaves nothing to wait for
    log_ignored("draining the deferred releases");
  }
}

}  // namespace syncmem::detail
