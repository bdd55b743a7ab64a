#include "backend/emulated/worker_stream.hpp"

#include <pthread.h>

#include <exception>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "syncmem/error.hpp"

namespace syncmem::detail::emulated {

namespace {

std::atomic<bool> workers_started{false};
std::atomic<bool> forked_child{false};

void note_a_worker_starts() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork(nullptr, nullptr, [] {
      if (workers_started.load(std::memory_order_relaxed)) forked_child.store(true, std::memory_order_relaxed);
    });
  });
  workers_started.store(true, std::memory_order_relaxed);
}

}  // namespace

bool forked_after_workers_started() noexcept { return forked_child.load(std::memory_order_relaxed); }

worker_stream::worker_stream(int device, const std::atomic<std::int64_t>& max_delay_us)
    : device_{device}, max_delay_us_{max_delay_us}, thread_{(note_a_worker_starts(), [this] { run(); })} {}

worker_stream::~worker_stream() {
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
  }
  work_available_.notify_one();
  thread_.join();
}

void worker_stream::enqueue(std::function<void()> op) {
  {
    std::lock_guard lock{mutex_};
    if (capturing_) {
      captured_.push_back(std::move(op));
      return;
    }
    queue_.push_back(std::move(op));
    ++enqueued_;
  }
  work_available_.notify_one();
}

void worker_stream::enqueue_all(const std::vector<std::function<void()>>& ops) {
  {
    std::lock_guard lock{mutex_};
    if (capturing_) {
      captured_.insert(captured_.end(), ops.begin(), ops.end());
      return;
    }
    queue_.insert(queue_.end(), ops.begin(), ops.end());
    enqueued_ += ops.size();
  }
  work_available_.notify_one();
}

void worker_stream::enqueue_uncaptured(std::function<void()> op) {
  {
    std::lock_guard lock{mutex_};
    queue_.push_back(std::move(op));
    ++enqueued_;
  }
  work_available_.notify_one();
}

void worker_stream::begin_capture() {
  std::lock_guard lock{mutex_};
  SYNCMEM_EXPECTS(!capturing_,
                  fmt::format("begin_capture: a stream of emulated:{} is already being captured", device_));
  capturing_ = true;
  captured_.clear();
  capture_invalidated_.clear();
}

std::vector<std::function<void()>> worker_stream::end_capture() {
  std::vector<std::function<void()>> ops;
  std::string invalidated;
  {
    std::lock_guard lock{mutex_};
    SYNCMEM_EXPECTS(capturing_, fmt::format("end_capture: the stream of emulated:{} is not being captured", device_));
    capturing_ = false;
    ops = std::exchange(captured_, {});
    invalidated = std::exchange(capture_invalidated_, {});
  }
  SYNCMEM_EXPECTS(invalidated.empty(),
                  fmt::format("end_capture: the capture on a stream of emulated:{} was invalidated by {}; no graph was "
                              "made (as cudaErrorStreamCaptureInvalidated)",
                              device_, invalidated));
  return ops;
}

bool worker_stream::capturing() {
  std::lock_guard lock{mutex_};
  return capturing_;
}

void worker_stream::invalidate_capture(const std::string& why) {
  std::lock_guard lock{mutex_};
  if (capturing_ && capture_invalidated_.empty()) capture_invalidated_ = why;
}

void worker_stream::synchronize() {
  std::unique_lock lock{mutex_};
  const auto target = enqueued_;
  work_done_.wait(lock, [&] { return completed_ >= target; });
  if (!error_.empty()) {
    auto message = std::exchange(error_, {});
    lock.unlock();
    SYNCMEM_FAIL(fmt::format("an operation on an emulated stream of emulated:{} failed: {}", device_, message));
  }
}

void worker_stream::wait_idle() {
  std::unique_lock lock{mutex_};
  const auto target = enqueued_;
  work_done_.wait(lock, [&] { return completed_ >= target; });
}

bool worker_stream::ready() {
  std::lock_guard lock{mutex_};
  return completed_ == enqueued_;
}

void worker_stream::run() {
  std::minstd_rand random{std::random_device{}()};
  for (;;) {
    std::function<void()> op;
    {
      std::unique_lock lock{mutex_};
      work_available_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    if (const auto max_delay = max_delay_us_.load(std::memory_order_relaxed); max_delay > 0) {
      std::uniform_int_distribution<std::int64_t> pick{0, max_delay};
      std::this_thread::sleep_for(std::chrono::microseconds{pick(random)});
    }
    std::string failure;
    try {
      op();
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "an unknown exception";
    }
    op = nullptr;  // before the completion is seen: what it held (a graph's host function) is released by then
    {
      std::lock_guard lock{mutex_};
      if (!failure.empty() && error_.empty()) error_ = std::move(failure);
      ++completed_;
    }
    work_done_.notify_all();
  }
}

}  // namespace syncmem::detail::emulated
