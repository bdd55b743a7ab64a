#include "backend/emulated/worker_stream.hpp"

#include <pthread.h>

#include <exception>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/emulated/capture_graph.hpp"
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
  std::shared_ptr<capture_graph> began;
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
    if (capture_ && capture_->origin() != this) capture_->forget(this);
    if (capture_ && capture_->origin() == this) began = std::move(capture_);
  }
  // A capture this stream began is over: the streams forked into it leave it.
  if (began) leave(*began);
  work_available_.notify_one();
  thread_.join();
}

void worker_stream::enqueue(std::function<void()> op) {
  {
    std::lock_guard lock{mutex_};
    if (capture_) {
      capture_->add(this, std::move(op));
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
    if (capture_) {
      for (const auto& op : ops) capture_->add(this, op);
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
  SYNCMEM_EXPECTS(!capture_, fmt::format("begin_capture: a stream of emulated:{} is already being captured", device_));
  capture_ = std::make_shared<capture_graph>(this);
}

std::vector<std::function<void()>> worker_stream::end_capture() {
  std::shared_ptr<capture_graph> g;
  {
    std::lock_guard lock{mutex_};
    SYNCMEM_EXPECTS(capture_, fmt::format("end_capture: the stream of emulated:{} is not being captured", device_));
    SYNCMEM_EXPECTS(capture_->origin() == this,
                    fmt::format("end_capture: this stream of emulated:{} was forked into a capture begun on another "
                                "stream; end it there (as cudaErrorStreamCaptureUnmatched)",
                                device_));
    g = std::exchange(capture_, nullptr);
  }
  capture_ended out = leave(*g);
  SYNCMEM_EXPECTS(out.failure.empty(),
                  fmt::format("end_capture: the capture on a stream of emulated:{} was invalidated by {}; no graph was "
                              "made (as cudaErrorStreamCaptureInvalidated)",
                              device_, out.failure));
  return std::move(out.ops);
}

capture_ended worker_stream::leave(capture_graph& g) {
  capture_ended out = g.end();
  for (worker_stream* w : out.forked) {
    std::lock_guard lock{w->mutex_};
    if (w->capture_.get() == &g) w->capture_.reset();
  }
  return out;
}

bool worker_stream::capturing() {
  std::lock_guard lock{mutex_};
  return capture_ != nullptr;
}

std::shared_ptr<capture_graph> worker_stream::capture() {
  std::lock_guard lock{mutex_};
  return capture_;
}

void worker_stream::join(const std::shared_ptr<capture_graph>& g, const std::vector<std::size_t>& nodes) {
  std::lock_guard lock{mutex_};
  if (capture_ && capture_ != g) {
    SYNCMEM_UNSUPPORTED(
        fmt::format("an event wait on a stream of emulated:{} that is being captured, for an event "
                    "recorded in another capture",
                    device_));
  }
  g->wait(this, nodes);
  capture_ = g;
}

void worker_stream::invalidate_capture(const std::string& why) {
  std::lock_guard lock{mutex_};
  if (capture_) capture_->invalidate(why);
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
