#include "backend/emulated/worker_stream.hpp"

#include <exception>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "syncmem/error.hpp"

namespace syncmem::detail::emulated {

worker_stream::worker_stream(int device, const std::atomic<std::int64_t>& max_delay_us)
    : device_{device}, max_delay_us_{max_delay_us}, thread_{[this] { run(); }} {}

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
    queue_.push_back(std::move(op));
    ++enqueued_;
  }
  work_available_.notify_one();
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
    {
      std::lock_guard lock{mutex_};
      if (!failure.empty() && error_.empty()) error_ = std::move(failure);
      ++completed_;
    }
    work_done_.notify_all();
  }
}

}  // namespace syncmem::detail::emulated
