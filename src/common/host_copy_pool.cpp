#include "host_copy_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace syncmem::detail {

namespace {
// How long an idle worker looks for work before it sleeps: longer than the
// gap between two chunks of a staged copy, short enough not to burn a core.
constexpr auto worker_spin = std::chrono::microseconds{100};
constexpr int max_threads = 64;
}  // namespace

host_copy_pool& host_copy_pool::instance() {
  static auto* const pool = new host_copy_pool{};  // never destroyed, see the header
  return *pool;
}

int host_copy_pool::default_threads() noexcept {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cores, 1U, 8U));
}

void host_copy_pool::copy(void* dst, const void* src, std::size_t bytes, int threads) {
  threads = std::clamp(threads, 1, max_threads);
  const std::size_t most_pieces = bytes / min_piece;
  if (threads == 1 || most_pieces < 2) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const auto pieces_wanted = std::min<std::size_t>(static_cast<std::size_t>(threads), most_pieces);
  // Pieces of whole pages, so that each thread faults in pages of its own.
  constexpr std::size_t page = 4096;
  const std::size_t piece = (bytes / pieces_wanted + page - 1) / page * page;
  const std::size_t pieces = (bytes + piece - 1) / piece;

  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  auto done = std::make_shared<completion>();
  done->remaining.store(pieces - 1, std::memory_order_relaxed);
  ensure_workers(static_cast<int>(pieces) - 1);
  bool wake = false;
  {
    std::lock_guard lock{mutex_};
    for (std::size_t i = 1; i < pieces; ++i) {
      const std::size_t offset = i * piece;
      queue_.push_back({d + offset, s + offset, std::min(piece, bytes - offset), done});
    }
    queued_.fetch_add(pieces - 1, std::memory_order_release);
    wake = sleeping_ > 0;
  }
  if (wake) available_.notify_all();

  std::memcpy(d, s, std::min(piece, bytes));
  for (;;) {
    const std::size_t left = done->remaining.load(std::memory_order_acquire);
    if (left == 0) break;
    if (!run_one()) done->remaining.wait(left, std::memory_order_acquire);
  }
}

void host_copy_pool::ensure_workers(int count) {
  count = std::min(count, max_threads);
  std::lock_guard lock{mutex_};
  while (workers_ < count) {
    std::thread{[this] { work(); }}.detach();  // lives as long as the process, like the pool
    ++workers_;
  }
}

bool host_copy_pool::run_one() {
  if (queued_.load(std::memory_order_acquire) == 0) return false;
  task t;
  {
    std::lock_guard lock{mutex_};
    if (queue_.empty()) return false;
    t = std::move(queue_.front());
    queue_.pop_front();
    queued_.fetch_sub(1, std::memory_order_relaxed);
  }
  run(t);
  return true;
}

void host_copy_pool::run(task& t) noexcept {
  std::memcpy(t.dst, t.src, t.bytes);
  if (t.done->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) t.done->remaining.notify_all();
  t.done.reset();
}

void host_copy_pool::work() {
  for (;;) {
    const auto spin_until = std::chrono::steady_clock::now() + worker_spin;
    while (queued_.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    }
    task t;
    {
      std::unique_lock lock{mutex_};
      if (queue_.empty()) {
        ++sleeping_;
        available_.wait(lock, [this] { return !queue_.empty(); });
        --sleeping_;
      }
      t = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    run(t);
  }
}

}  // namespace syncmem::detail
