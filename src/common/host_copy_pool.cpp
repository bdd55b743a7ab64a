#include "host_copy_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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
  // Half the cores, at most 8: 8 threads with streaming stores copy 43 GB/s
  // on the H100 machine, near the link's 55 GB/s, and leave cores to the
  // CUDA driver and the application. With 16 threads on its 16 cores, staged
  // copies ran at 40 GB/s in some runs and at 4-13 GB/s in others.
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cores / 2, 1U, 8U));
}

// A large piece copied with streaming stores: the destination is not pulled
// into the cache first, which saves a third of the memory traffic of the copy.
// Measured on the H100 machine: 16 threads reach 59.5 GB/s this way, 45 GB/s
// with memcpy (bench/tuning/engine_tuning.cpp).
void host_copy_pool::copy_piece(void* dst, const void* src, std::size_t bytes, host_store store) noexcept {
#if defined(__SSE2__)
  constexpr std::size_t streaming_from = std::size_t{64} << 10;
  if (store == host_store::streaming && bytes >= streaming_from) {
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    auto* out = reinterpret_cast<__m128i*>(d);
    const auto* in = reinterpret_cast<const __m128i*>(s);
    const std::size_t blocks = bytes / 64;
    for (std::size_t i = 0; i < blocks; ++i, out += 4, in += 4) {
      const __m128i a = _mm_loadu_si128(in);
      const __m128i b = _mm_loadu_si128(in + 1);
      const __m128i c = _mm_loadu_si128(in + 2);
      const __m128i e = _mm_loadu_si128(in + 3);
      _mm_stream_si128(out, a);
      _mm_stream_si128(out + 1, b);
      _mm_stream_si128(out + 2, c);
      _mm_stream_si128(out + 3, e);
    }
    std::memcpy(out, in, bytes - blocks * 64);
    _mm_sfence();  // visible before the piece is reported done (and before any DMA reads it)
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

void host_copy_pool::copy(void* dst, const void* src, std::size_t bytes, int threads, host_store store) {
  threads = std::clamp(threads, 1, max_threads);
  const std::size_t most_pieces = bytes / min_piece;
  if (threads == 1 || most_pieces < 2) {
    copy_piece(dst, src, bytes, store);
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
      queue_.push_back({d + offset, s + offset, std::min(piece, bytes - offset), store, done});
    }
    queued_.fetch_add(pieces - 1, std::memory_order_release);
    wake = sleeping_ > 0;
  }
  if (wake) available_.notify_all();

  copy_piece(d, s, std::min(piece, bytes), store);
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
  copy_piece(t.dst, t.src, t.bytes, t.store);
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
