#include "transfer/host_copy_pool.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
// x86-64 with GCC or Clang: code for CPU features checked at run time
// (AVX-512 stores, CLDEMOTE), each in a function of its own target.
#define SYNCMEM_X86_TARGETS 1
#endif

#include "syncmem/error.hpp"
#include "syncmem/event.hpp"

namespace syncmem::detail {

namespace {
// How long an idle worker looks for work before it sleeps: longer than the
// tail of a staged upload, so that back-to-back copies find the workers awake
// (waking them in a virtual machine delayed a 64 MiB upload's first chunks
// fourfold in bench/tuning/transfer_timeline.cpp).
constexpr auto worker_spin = std::chrono::microseconds{1000};
// How long a caller waiting for a chunk spins before it sleeps: the pieces of
// a chunk take tens of microseconds, and waking a sleeper takes several.
constexpr auto caller_spin = std::chrono::microseconds{50};
constexpr int max_threads = 64;
constexpr std::size_t page = 4096;

void relax() noexcept {
#if defined(__SSE2__)
  _mm_pause();
#endif
}

std::atomic<std::uint64_t> demoted{0};       // see host_copy_pool::demoted_bytes
std::atomic<std::uint64_t> gates_waited{0};  // see host_copy_pool::gate_waits

// Staging ranges this thread has read for a from_staging job and will demote
// when it would otherwise wait (see "Demoting later" in the header), oldest
// first, a page at a time, stopping as soon as the wait is over.
struct pending_demotes {
  static constexpr int capacity = 64;
  static constexpr std::size_t step = 4096;
  struct range {
    const std::byte* begin;
    std::size_t bytes;
  };
  std::array<range, capacity> ranges{};
  int head = 0;  // the oldest range not yet demoted
  int count = 0;

  [[nodiscard]] bool empty() const noexcept { return head == count; }
  // Demotes until `stop()` (checked before each page) or until nothing is left.
  template <class Stop>
  void flush(Stop stop) noexcept {
    while (head < count && !stop()) {
      range& r = ranges[head];
      const std::size_t n = std::min(r.bytes, step);
      host_copy_pool::demote(r.begin, n);
      demoted.fetch_add(n, std::memory_order_relaxed);
      r.begin += n;
      r.bytes -= n;
      if (r.bytes == 0) ++head;
    }
    if (head == count) head = count = 0;
  }
  void flush_all() noexcept {
    flush([] { return false; });
  }
  // When full, the oldest range is dropped rather than demoted here, on the
  // copy's path (a batch's many small ranges filled it): demoting is a hint,
  // and the oldest lines are the likeliest to have left the core already.
  void add(const std::byte* begin, std::size_t bytes) noexcept {
    if (count == capacity) {
      if (head == 0) head = 1;
      std::copy(ranges.begin() + head, ranges.begin() + count, ranges.begin());
      count -= head;
      head = 0;
    }
    ranges[count++] = {begin, bytes};
  }
};
thread_local pending_demotes pending;

// Waits for `done()` without sleeping: pauses first (the wait is usually
// short), then yields the core. Demotes what the thread has read first.
template <class Done>
void spin_until(Done done) noexcept {
  if (!pending.empty()) pending.flush(done);
  for (unsigned round = 0; !done(); ++round) {
    if (round < 4096) {
      relax();
    } else {
      std::this_thread::yield();
    }
  }
}
}  // namespace

host_copy_pool& host_copy_pool::instance() {
  static auto* const pool = new host_copy_pool{};  // never destroyed, see the header
  return *pool;
}

int host_copy_pool::default_threads() noexcept {
  // Half the cores, at most 8: enough to feed the link (transfer/h2d in
  // bench/results/h200) while leaving cores to the driver and the application,
  // where all the cores made staged copies erratic (bench/results/h100). Counted
  // once, because hardware_concurrency reads /sys on glibc on every call.
  static const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 2, 1U, 8U));
  return threads;
}

namespace {
// Copies the bytes before `d`'s next `alignment`-byte boundary with memcpy and
// steps past them.
[[maybe_unused]] void copy_head(std::byte*& d, const std::byte*& s, std::size_t& bytes,
                                std::size_t alignment) noexcept {
  const std::size_t head = std::min(bytes, (alignment - reinterpret_cast<std::uintptr_t>(d) % alignment) % alignment);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
}

#if defined(__SSE2__)
void stream_16(std::byte* d, const std::byte* s, std::size_t bytes) noexcept {
  copy_head(d, s, bytes, 16);
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
}
#endif

#if defined(SYNCMEM_X86_TARGETS)
// Whole cache lines in one store each (AVX-512).
__attribute__((target("avx512f"))) void stream_64(std::byte* d, const std::byte* s, std::size_t bytes) noexcept {
  copy_head(d, s, bytes, 64);
  const std::size_t blocks = bytes / 256;
  for (std::size_t i = 0; i < blocks; ++i, d += 256, s += 256) {
    const __m512i a = _mm512_loadu_si512(s);
    const __m512i b = _mm512_loadu_si512(s + 64);
    const __m512i c = _mm512_loadu_si512(s + 128);
    const __m512i e = _mm512_loadu_si512(s + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d), a);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + 64), b);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + 128), c);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + 192), e);
  }
  std::memcpy(d, s, bytes - blocks * 256);
  _mm_sfence();
}

bool has_avx512f() noexcept {
  __builtin_cpu_init();  // may run before the constructors that would initialise what it reads
  return __builtin_cpu_supports("avx512f") != 0;
}
#endif
}  // namespace

int host_copy_pool::widest_streaming_store() noexcept {
#if defined(SYNCMEM_X86_TARGETS)
  static const int widest = has_avx512f() ? 64 : 16;
  return widest;
#elif defined(__SSE2__)
  return 16;
#else
  return 0;
#endif
}

void host_copy_pool::copy_streaming(void* dst, const void* src, std::size_t bytes, int store_bytes) noexcept {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  const int widest = widest_streaming_store();
#if defined(SYNCMEM_X86_TARGETS)
  if (store_bytes >= 64 && widest >= 64) {
    stream_64(d, s, bytes);
    return;
  }
#endif
#if defined(__SSE2__)
  if (store_bytes >= 16 && widest >= 16) {
    stream_16(d, s, bytes);
    return;
  }
#endif
  (void)widest;
  std::memcpy(d, s, bytes);
}

// A large piece is copied with the widest streaming stores the CPU has, which
// do not pull the destination into the cache first and so save a third of the
// copy's memory traffic (bench/tuning/engine_tuning.cpp measures both ways).
void host_copy_pool::copy_piece(void* dst, const void* src, std::size_t bytes) noexcept {
  constexpr std::size_t streaming_from = std::size_t{64} << 10;
  if (bytes >= streaming_from) {
    copy_streaming(dst, src, bytes, widest_streaming_store());
  } else {
    std::memcpy(dst, src, bytes);
  }
}

#if defined(SYNCMEM_X86_TARGETS)
namespace {
bool has_cldemote() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (c & (1U << 25)) != 0;  // CPUID.(7,0):ECX[25]
}

__attribute__((target("cldemote"))) void demote_lines(const std::byte* p, std::size_t bytes) noexcept {
  const auto end = reinterpret_cast<std::uintptr_t>(p) + bytes;
  for (auto line = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{63}; line < end; line += 64) {
    _cldemote(reinterpret_cast<void*>(line));
  }
}
}  // namespace
#endif

bool host_copy_pool::can_demote() noexcept {
#if defined(SYNCMEM_X86_TARGETS)
  static const bool supported = has_cldemote();
  return supported;
#else
  return false;
#endif
}

void host_copy_pool::demote(const void* p, std::size_t bytes) noexcept {
#if defined(SYNCMEM_X86_TARGETS)
  if (can_demote() && bytes > 0) demote_lines(static_cast<const std::byte*>(p), bytes);
#else
  (void)p;
  (void)bytes;
#endif
}

std::uint64_t host_copy_pool::demoted_bytes() noexcept { return demoted.load(std::memory_order_relaxed); }
void host_copy_pool::demote_pending() noexcept { pending.flush_all(); }
std::uint64_t host_copy_pool::gate_waits() noexcept { return gates_waited.load(std::memory_order_relaxed); }

void host_copy_pool::copy(void* dst, const void* src, std::size_t bytes, int threads) {
  threads = std::clamp(threads, 1, max_threads);
  if (threads == 1 || bytes < 2 * min_piece) {
    copy_piece(dst, src, bytes);
    return;
  }
  job j{*this,
        job::direction::host_to_host,
        static_cast<std::byte*>(dst),
        static_cast<const std::byte*>(src),
        {{0, bytes}},
        threads};
  j.open(0, nullptr, nullptr);
  j.finish(0);
}

void host_copy_pool::wake(int threads) {
  threads = std::clamp(threads, 1, max_threads);
  if (threads == 1) return;
  ensure_workers(threads - 1);
  announce();
}

void host_copy_pool::ensure_workers(int count) {
  count = std::min(count, max_threads);
  // Every staged copy asks (twice: wake, then its job); the pool has grown
  // long before, so the answer is one load, not a lock.
  if (workers_.load(std::memory_order_acquire) >= count) return;
  std::lock_guard lock{mutex_};
  while (workers_.load(std::memory_order_relaxed) < count) {
    std::thread{[this] { work(); }}.detach();  // lives as long as the process, like the pool
    workers_.fetch_add(1, std::memory_order_release);
  }
}

int host_copy_pool::publish(job* j) {
  for (int i = 0; i < slot_count; ++i) {
    job* expected = nullptr;
    if (slots_[static_cast<std::size_t>(i)].current.compare_exchange_strong(expected, j)) return i;
  }
  return -1;
}

// A pool thread counts itself as a visitor before it reads the slot, and the
// slot is emptied before its visitors are counted (both sequentially
// consistent): a thread that read the job is seen here until it has left it.
void host_copy_pool::withdraw(int i) {
  slot& s = slots_[static_cast<std::size_t>(i)];
  s.current.store(nullptr);
  spin_until([&] { return s.visitors.load() == 0; });
}

void host_copy_pool::announce() {
  epoch_.fetch_add(1);
  if (sleeping_.load() > 0) {
    { std::lock_guard lock{mutex_}; }  // a sleeper is either waiting already or sees the new epoch
    available_.notify_all();
  }
}

bool host_copy_pool::help(slot& s) {
  if (s.current.load(std::memory_order_relaxed) == nullptr) return false;
  s.visitors.fetch_add(1);
  bool ran = false;
  if (job* j = s.current.load(); j != nullptr && j->has_work()) {
    if (j->helpers_.fetch_add(1, std::memory_order_relaxed) < j->helpers_allowed_.load(std::memory_order_relaxed)) {
      std::size_t p = 0;
      // Leaves when the job wants fewer threads than are on it.
      while (j->helpers_.load(std::memory_order_relaxed) <= j->helpers_allowed_.load(std::memory_order_relaxed) &&
             j->claim(p, j->opened_.load(std::memory_order_acquire))) {
        j->run(p);
        ran = true;
      }
    }
    j->helpers_.fetch_sub(1, std::memory_order_relaxed);
  }
  s.visitors.fetch_sub(1, std::memory_order_release);  // the last touch of the job
  return ran;
}

void host_copy_pool::work() {
  for (;;) {
    const std::size_t seen = epoch_.load();
    bool ran = false;
    for (slot& s : slots_) ran = help(s) || ran;
    if (ran) continue;
    // No work: demote what the jobs left (see "Demoting later"), until there is some.
    if (!pending.empty()) pending.flush([&] { return epoch_.load(std::memory_order_relaxed) != seen; });
    const auto spin_until = std::chrono::steady_clock::now() + worker_spin;
    for (unsigned round = 1; epoch_.load() == seen; ++round) {
      relax();
      if (round % 64 != 0) continue;
      if (std::chrono::steady_clock::now() >= spin_until) break;
      if (round % 1024 == 0) std::this_thread::yield();  // leaves the core to others that need it
    }
    if (epoch_.load() == seen) {
      std::unique_lock lock{mutex_};
      sleeping_.fetch_add(1);
      available_.wait(lock, [&] { return epoch_.load() != seen; });
      sleeping_.fetch_sub(1);
    }
  }
}

// ---- job ----------------------------------------------------------------------------

host_copy_pool::job::job(host_copy_pool& pool, direction dir, std::byte* dst, const std::byte* src,
                         const std::vector<chunk>& chunks, int threads)
    : pool_{pool},
      dir_{dir},
      dst_{dst},
      src_{src},
      chunks_{std::make_unique<chunk_state[]>(chunks.size())},
      chunk_count_{chunks.size()},
      helpers_most_{std::clamp(threads, 1, max_threads) - 1},
      helpers_allowed_{helpers_most_},
      ordinary_from_{chunks.size()},
      demoted_from_{chunks.size()} {
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const std::size_t bytes = chunks[c].bytes;
    // About one piece per thread, in whole pages, within [min_piece, max_piece].
    const std::size_t even = (bytes / static_cast<std::size_t>(helpers_most_ + 1) + page - 1) / page * page;
    const std::size_t size = std::clamp(even, min_piece, max_piece);
    for (std::size_t at = 0; at < bytes; at += size) {
      pieces_.push_back({chunks[c].offset + at, std::min(size, bytes - at), c});
    }
    chunks_[c].range = chunks[c];
    chunks_[c].end_piece = pieces_.size();
  }
  if (helpers_most_ > 0) pool_.ensure_workers(helpers_most_);
}

host_copy_pool::job::~job() { stop(); }

void host_copy_pool::job::open(std::size_t c, std::byte* staging, const event* gate) {
  open_chunk(c, staging, gate, nullptr, false);
}

void host_copy_pool::job::open(std::size_t c, std::byte* staging, const event* gate, std::byte* user) {
  open_chunk(c, staging, gate, user, false);
}

void host_copy_pool::job::open_behind_previous(std::size_t c, std::byte* staging, std::byte* user) {
  SYNCMEM_EXPECTS(c > 0, "host_copy_pool::job::open_behind_previous: chunk 0 has no chunk before it");
  open_chunk(c, staging, chunks_[c - 1].gate, user, true);
}

void host_copy_pool::job::open_chunk(std::size_t c, std::byte* staging, const event* gate, std::byte* user,
                                     bool shares_wait) {
  chunk_state& state = chunks_[c];
  state.staging = staging;
  state.user = user;
  state.gate = gate;
  const bool shares = shares_wait && gate != nullptr;
  state.gate_owner = shares ? chunks_[c - 1].gate_owner : &state;
  state.gate_state.store(gate == nullptr || shares ? gate_open : gate_closed, std::memory_order_relaxed);
  state.remaining.store(state.end_piece - (c == 0 ? 0 : chunks_[c - 1].end_piece), std::memory_order_relaxed);
  ++opened_chunks_;
  opened_.store(state.end_piece, std::memory_order_release);  // publishes the chunk's state
  if (helpers_most_ == 0) return;
  if (slot_ < 0) slot_ = pool_.publish(this);  // with every slot taken, the caller copies alone for now
  if (slot_ >= 0) pool_.announce();
}

bool host_copy_pool::job::claim(std::size_t& p, std::size_t limit) noexcept {
  std::size_t next = next_.load(std::memory_order_relaxed);
  do {
    if (next >= limit || failed_.load(std::memory_order_relaxed)) return false;
  } while (!next_.compare_exchange_weak(next, next + 1, std::memory_order_acquire, std::memory_order_relaxed));
  p = next;
  return true;
}

bool host_copy_pool::job::has_work() const noexcept {
  return next_.load(std::memory_order_relaxed) < opened_.load(std::memory_order_acquire) &&
         !failed_.load(std::memory_order_relaxed);
}

void host_copy_pool::job::fail(std::exception_ptr error) noexcept {
  bool expected = false;
  if (!error_taken_.compare_exchange_strong(expected, true)) return;  // the first error is the one reported
  error_ = std::move(error);
  failed_.store(true, std::memory_order_release);  // publishes error_
}

// One thread waits for the gate's event and the others watch it wait, because
// many threads in cudaEventSynchronize at once contend inside the driver.
void host_copy_pool::job::pass_gate(chunk_state& state) noexcept {
  int expected = gate_closed;
  if (state.gate_state.compare_exchange_strong(expected, gate_waiting, std::memory_order_acquire)) {
    try {
      gates_waited.fetch_add(1, std::memory_order_relaxed);
      state.gate->synchronize();
    } catch (...) {
      fail(std::current_exception());
    }
    state.gate_state.store(gate_open, std::memory_order_release);
    return;
  }
  spin_until([&] { return state.gate_state.load(std::memory_order_acquire) == gate_open; });
}

void host_copy_pool::job::run(std::size_t p) noexcept {
  const piece& pc = pieces_[p];
  chunk_state& state = chunks_[pc.chunk];
  chunk_state& gate = *state.gate_owner;
  if (gate.gate_state.load(std::memory_order_acquire) != gate_open) pass_gate(gate);
  if (!failed_.load(std::memory_order_acquire)) {
    const std::size_t in_chunk = pc.offset - state.range.offset;
    switch (dir_) {
      case direction::to_staging: {
        std::byte* out = state.staging + in_chunk;
        const bool demoting = pc.chunk >= demoted_from_;
        const std::byte* in = state.user != nullptr ? state.user + in_chunk : src_ + pc.offset;
        if (pc.chunk < ordinary_from_ || (demoting && !can_demote())) {
          copy_piece(out, in, pc.bytes);
        } else {
          std::memcpy(out, in, pc.bytes);
          if (demoting) {  // a DMA reads it next: out of this core's caches first
            demote(out, pc.bytes);
            demoted.fetch_add(pc.bytes, std::memory_order_relaxed);
          }
        }
        break;
      }
      case direction::from_staging: {
        std::byte* out = state.user != nullptr ? state.user + in_chunk : dst_ + pc.offset;
        if (ordinary_out_) {
          std::memcpy(out, state.staging + in_chunk, pc.bytes);
        } else {
          copy_piece(out, state.staging + in_chunk, pc.bytes);
        }
        // Demoted before the next DMA into the buffer, once the piece is reported done.
        if (demote_staging_) pending.add(state.staging + in_chunk, pc.bytes);
        break;
      }
      case direction::host_to_host:
        copy_piece(dst_ + pc.offset, src_ + pc.offset, pc.bytes);
        break;
    }
  }
  const bool chunk_done = state.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1;
  done_.fetch_add(1, std::memory_order_release);
  if (chunk_done || failed_.load(std::memory_order_relaxed)) {
    signal_.fetch_add(1, std::memory_order_release);
    signal_.notify_all();
  }
}

void host_copy_pool::job::finish(std::size_t c) {
  chunk_state& state = chunks_[c];
  std::size_t p = 0;
  while (claim(p, std::min(state.end_piece, opened_.load(std::memory_order_acquire)))) run(p);
  if (!pending.empty()) {  // while the pool threads copy the rest of the chunk
    pending.flush([&] {
      return state.remaining.load(std::memory_order_acquire) == 0 || failed_.load(std::memory_order_relaxed);
    });
  }
  const auto spin_until = std::chrono::steady_clock::now() + caller_spin;
  for (unsigned round = 0;; ++round) {
    if (failed_.load(std::memory_order_acquire)) {
      stop();
      std::rethrow_exception(error_);
    }
    if (state.remaining.load(std::memory_order_acquire) == 0) return;
    if (round % 64 != 63 || std::chrono::steady_clock::now() < spin_until) {
      relax();
      continue;
    }
    const std::uint32_t seen = signal_.load(std::memory_order_acquire);
    if (state.remaining.load(std::memory_order_acquire) == 0 || failed_.load(std::memory_order_acquire)) continue;
    signal_.wait(seen, std::memory_order_acquire);
  }
}

bool host_copy_pool::job::finished(std::size_t c) const noexcept {
  return c < opened_chunks_ && chunks_[c].remaining.load(std::memory_order_acquire) == 0;
}

void host_copy_pool::job::set_helpers(int helpers) noexcept {
  helpers = std::clamp(helpers, 0, helpers_most_);
  const int before = helpers_allowed_.exchange(helpers, std::memory_order_relaxed);
  if (helpers > before && slot_ >= 0) pool_.announce();  // threads that left may come back
}

void host_copy_pool::job::stop() noexcept {
  if (stopped_) return;
  stopped_ = true;
  const std::size_t claimed = next_.exchange(pieces_.size() + 1);  // nothing more can be claimed
  if (slot_ >= 0) pool_.withdraw(slot_);                           // no pool thread touches the job any more
  slot_ = -1;
  const std::size_t started = std::min(claimed, pieces_.size());
  while (done_.load(std::memory_order_acquire) < started) std::this_thread::yield();
}

}  // namespace syncmem::detail
