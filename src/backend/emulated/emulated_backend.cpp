// Emulated devices: devices made of host memory (see include/syncmem/emulated.hpp).

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "backend/emulated/worker_stream.hpp"
#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "syncmem/emulated.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::emulated {
namespace {

constexpr int max_devices = 64;
constexpr std::size_t device_alignment = 256;
constexpr std::size_t vmm_page = std::size_t{2} << 20;
constexpr unsigned char poison_byte = 0xFF;

struct allocation {
  std::size_t size;
  memory_kind kind;
  int device;  // -1 for host memory
};

struct device_state {
  int index;
  std::size_t capacity;
  std::atomic<std::size_t> used{0};
  std::mutex streams_mutex;
  // Shared: a device-wide synchronize keeps each stream alive while it waits
  // on it, even if its owner destroys it meanwhile on another thread.
  std::unordered_map<worker_stream*, std::shared_ptr<worker_stream>> streams;
  std::once_flag default_stream_once;
  worker_stream* default_stream = nullptr;  // never destroyed
  std::once_flag peers_once;
};

// A stream-ordered pool (the emulated cudaMemPoolCreate). A freed block is
// `pending` until its stream's worker reaches the free; meanwhile only that
// stream may reuse it (its later work runs after the free, as with CUDA's
// same-stream reuse). Once reached it moves to `cached`, free for any stream.
struct memory_pool {
  struct pending_free {
    std::size_t size;
    const void* stream;    // the worker_stream the block was freed on
    std::uint64_t ticket;  // tells a stale give-back from the current one
  };
  std::mutex mutex;
  int device = 0;
  std::size_t release_threshold = 0;
  std::multimap<std::size_t, void*> cached;  // by size
  std::unordered_map<void*, std::size_t> live;
  std::unordered_map<void*, pending_free> pending;
  std::multimap<std::pair<const void*, std::size_t>, void*> pending_by_stream;  // (stream, size)
  std::uint64_t next_ticket = 0;
  std::size_t cached_bytes = 0;
  memory_pool_usage usage;
  bool destroyed = false;

  // Under mutex: forgets p's pending free, so that its give-back does nothing.
  void drop_pending(void* p) {
    auto it = pending.find(p);
    auto [first, last] = pending_by_stream.equal_range({it->second.stream, it->second.size});
    for (auto b = first; b != last; ++b) {
      if (b->second == p) {
        pending_by_stream.erase(b);
        break;
      }
    }
    pending.erase(it);
  }
};

struct pool_holder {
  std::shared_ptr<memory_pool> pool;  // shared with frees still queued on streams
};

struct physical_block {
  int fd;
  int device;
  std::size_t size;
  bool fresh;
};

// Parses an environment variable holding a whole number in [low, high].
std::optional<std::int64_t> read_env(const char* name, std::int64_t low, std::int64_t high, std::string& problem) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  std::int64_t value = 0;
  const char* end = text + std::strlen(text);
  auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc{} || ptr != end || value < low || value > high) {
    if (problem.empty()) {
      problem = fmt::format("{}='{}' is not a whole number in {}..{}", name, text, low, high);
    }
    return std::nullopt;
  }
  return value;
}

class backend_impl final : public backend {
 public:
  backend_impl() {
    std::string problem;
    emulated_options options;
    options.device_count = 0;
    if (auto n = read_env("SYNCMEM_EMULATED_DEVICES", 0, max_devices, problem))
      options.device_count = static_cast<int>(*n);
    if (auto d = read_env("SYNCMEM_EMULATED_DELAY_US", 0, 10'000'000, problem))
      options.max_delay = std::chrono::microseconds{*d};
    if (auto m = read_env("SYNCMEM_EMULATED_MEMORY_MB", 1, std::int64_t{1} << 24, problem)) {
      options.memory_per_device = static_cast<std::size_t>(*m) << 20;
    }
    if (auto p = read_env("SYNCMEM_EMULATED_POISON", 0, 1, problem)) options.poison = *p != 0;
    if (!problem.empty()) {
      env_problem_ = problem;
      logger().error("emulated devices are off: {}", problem);
      options.device_count = 0;
    }
    configure(options);
  }

  void configure(const emulated_options& options) {
    SYNCMEM_EXPECTS(
        options.device_count >= 0 && options.device_count <= max_devices,
        fmt::format("emulated_options::device_count is {}: valid range is 0..{}", options.device_count, max_devices));
    SYNCMEM_EXPECTS(options.max_delay.count() >= 0, "emulated_options::max_delay must not be negative");
    std::lock_guard lock{config_mutex_};
    const int current = count_.load();
    SYNCMEM_EXPECTS(options.device_count >= current,
                    fmt::format("emulated devices can be added but not removed: {} are enabled, {} asked for", current,
                                options.device_count));
    max_delay_us_.store(options.max_delay.count());
    poison_.store(options.poison);
    for (int i = current; i < options.device_count; ++i) {
      auto* state = new device_state{};  // never deleted: objects may outlive main()
      state->index = i;
      state->capacity = options.memory_per_device;
      devices_[static_cast<std::size_t>(i)].store(state);
    }
    if (options.device_count > current) {
      memory_per_device_ = options.memory_per_device;
      count_.store(options.device_count);
    }
  }

  emulated_options options() {
    std::lock_guard lock{config_mutex_};
    emulated_options o;
    o.device_count = count_.load();
    o.memory_per_device = memory_per_device_;
    o.max_delay = std::chrono::microseconds{max_delay_us_.load()};
    o.poison = poison_.load();
    return o;
  }

  void set_delay(std::chrono::microseconds d) {
    SYNCMEM_EXPECTS(d.count() >= 0, "the emulated delay must not be negative");
    max_delay_us_.store(d.count());
  }
  void set_poison(bool on) { poison_.store(on); }

  // ---- devices -------------------------------------------------------------
  device_kind kind() const noexcept override { return device_kind::emulated; }
  const backend_traits& traits() const noexcept override {
    static constexpr backend_traits t{.pointer_info_is_local = true, .device_memory_is_host_memory = true};
    return t;
  }
  int device_count() noexcept override { return count_.load(std::memory_order_acquire); }
  std::string why_no_devices() override {
    if (!env_problem_.empty()) return env_problem_;
    return "emulated devices are not enabled (set SYNCMEM_EMULATED_DEVICES=N or call "
           "syncmem::enable_emulated_devices)";
  }

  device_properties properties(int index) override {
    auto& d = device(index);
    device_properties p;
    p.id = device_id::emulated(index);
    p.name = fmt::format("syncmem emulated device {}", index);
    p.total_memory = d.capacity;
    p.multiprocessors = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
    p.async_engines = 1;
    p.supports_virtual_memory = true;
    return p;
  }

  memory_info memory(int index) override {
    auto& d = device(index);
    const auto used = std::min(d.used.load(), d.capacity);
    return {d.capacity - used, d.capacity};
  }

  void synchronize_device(int index) override {
    for_each_stream(index, [](worker_stream& s) { s.synchronize(); });
  }

  // Calls `f` on every stream of the device, the default stream last, outside the lock.
  template <class F>
  void for_each_stream(int index, F f) {
    auto& d = device(index);
    std::vector<std::shared_ptr<worker_stream>> streams;
    worker_stream* default_stream = nullptr;
    {
      std::lock_guard lock{d.streams_mutex};
      for (const auto& entry : d.streams) streams.push_back(entry.second);
      default_stream = d.default_stream;  // never destroyed
    }
    for (const auto& s : streams) f(*s);
    if (default_stream != nullptr) f(*default_stream);
  }

  void make_current(int) override {}
  int current_index() override { return 0; }

  // ---- memory ----------------------------------------------------------------
  void* allocate(int index, std::size_t bytes) override {
    auto& d = device(index);
    const std::size_t size = round_up(std::max<std::size_t>(bytes, 1), device_alignment);
    if (!reserve_capacity(d, size)) return nullptr;
    void* p = ::operator new (size, std::align_val_t{device_alignment}, std::nothrow);
    if (p == nullptr) {
      d.used.fetch_sub(size);
      return nullptr;
    }
    if (poison_.load()) std::memset(p, poison_byte, size);
    add_allocation(p, {size, memory_kind::device, index});
    return p;
  }

  void deallocate(int index, void* p, std::size_t) noexcept override {
    if (p == nullptr) return;
    // Like cudaFree, wait for the device first: work in flight may use it. An
    // earlier failure is reported by its own synchronize.
    detail::ignore_failure("synchronizing an emulated device before a free", [&] { synchronize_device(index); });
    auto removed = remove_allocation(p);
    if (!removed) {
      logger().error("emulated deallocate of {} which emulated:{} did not allocate", p, index);
      return;
    }
    device(index).used.fetch_sub(removed->size);
    ::operator delete (p, std::align_val_t{device_alignment});
  }

  bool supports_pools(int index) override {
    (void)device(index);
    return true;
  }

  void* create_pool(int index, std::size_t release_threshold) override {
    (void)device(index);
    auto* holder = new pool_holder{std::make_shared<memory_pool>()};
    holder->pool->device = index;
    holder->pool->release_threshold = release_threshold;
    return holder;
  }

  void destroy_pool(int, void* handle) noexcept override {
    auto* holder = static_cast<pool_holder*>(handle);
    std::vector<void*> release;
    {
      std::lock_guard lock{holder->pool->mutex};
      holder->pool->destroyed = true;
      for (auto& entry : holder->pool->cached) release.push_back(entry.second);
      holder->pool->cached.clear();
      holder->pool->cached_bytes = 0;
    }
    for (void* p : release) free_now(holder->pool->device, p);
    delete holder;
  }

  void* pool_allocate(int index, void* handle, std::size_t bytes, CUstream_st* s) override {
    auto& w = to_stream(s, index);
    refuse_to_record(w, "a stream-ordered allocation");
    const void* stream = &w;
    auto& pool = *static_cast<pool_holder*>(handle)->pool;
    const std::size_t size = round_up(std::max<std::size_t>(bytes, 1), device_alignment);
    std::unique_lock lock{pool.mutex};
    std::size_t block = 0;
    void* p = take_pool_block(pool, stream, size, block);
    if (p == nullptr && !pool.pending.empty()) {
      // Frees still queued on other streams hold memory that CUDA would hand
      // over behind an event; waiting for them is the emulated equivalent.
      lock.unlock();
      wait_device_idle(index);
      lock.lock();
      p = take_pool_block(pool, stream, size, block);
    }
    if (p == nullptr) return nullptr;
    pool.live.emplace(p, block);
    pool.usage.used += block;
    pool.usage.used_high = std::max(pool.usage.used_high, pool.usage.used);
    return p;
  }

  void pool_deallocate(int index, void* handle, void* p, CUstream_st* s) noexcept override {
    std::shared_ptr<memory_pool> pool = static_cast<pool_holder*>(handle)->pool;
    worker_stream* w = nullptr;
    std::uint64_t ticket = 0;
    {
      std::lock_guard lock{pool->mutex};
      auto it = pool->live.find(p);
      if (it == pool->live.end()) {
        logger().error("emulated pool free of {} which the pool did not allocate", p);
        return;
      }
      const std::size_t size = it->second;
      pool->live.erase(it);
      pool->usage.used -= size;
      // Without a usable stream the block is free at once.
      detail::ignore_failure("finding the stream of a stream-ordered free", [&] { w = &to_stream(s, index); });
      ticket = ++pool->next_ticket;
      pool->pending.emplace(p, memory_pool::pending_free{size, w, ticket});
      if (w != nullptr) pool->pending_by_stream.emplace(std::pair<const void*, std::size_t>{w, size}, p);
    }
    auto give_back = [this, pool, p, ticket] {
      std::lock_guard lock{pool->mutex};
      auto it = pool->pending.find(p);
      if (it == pool->pending.end() || it->second.ticket != ticket) return;  // reused on its stream since
      const std::size_t size = it->second.size;
      pool->drop_pending(p);
      if (pool->destroyed) {
        pool->usage.reserved -= size;
        free_now(pool->device, p);
        return;
      }
      pool->cached.emplace(size, p);
      pool->cached_bytes += size;
      if (pool->cached_bytes > pool->release_threshold) release_cached(*pool, pool->release_threshold);
    };
    if (w != nullptr) {
      try {
        // A free cannot be recorded yet: it fails the capture, and the block
        // goes back once the work enqueued before the capture has run.
        w->invalidate_capture("a stream-ordered free, which emulated devices cannot record yet");
        w->enqueue_uncaptured(give_back);
        return;
      } catch (...) {
        // the stream cannot take it, so the block is free at once
        detail::log_ignored("handing a stream-ordered free to its stream");
      }
    }
    give_back();
  }

  void pool_trim(int, void* handle, std::size_t keep_bytes) override {
    auto& pool = *static_cast<pool_holder*>(handle)->pool;
    std::lock_guard lock{pool.mutex};
    release_cached(pool, keep_bytes);
  }

  memory_pool_usage pool_usage(int, void* handle) override {
    auto& pool = *static_cast<pool_holder*>(handle)->pool;
    std::lock_guard lock{pool.mutex};
    return pool.usage;
  }

  void pool_reset_peaks(int, void* handle) override {
    auto& pool = *static_cast<pool_holder*>(handle)->pool;
    std::lock_guard lock{pool.mutex};
    pool.usage.reserved_high = pool.usage.reserved;
    pool.usage.used_high = pool.usage.used;
  }

  void* allocate_pinned(std::size_t bytes, unsigned) override {
    const std::size_t size = round_up(std::max<std::size_t>(bytes, 1), 4096);
    void* p = ::operator new (size, std::align_val_t{4096}, std::nothrow);
    if (p == nullptr) return nullptr;
    if (poison_.load()) std::memset(p, poison_byte, size);
    add_allocation(p, {size, memory_kind::pinned_host, -1});
    return p;
  }

  void deallocate_pinned(void* p, std::size_t) noexcept override {
    if (p == nullptr) return;
    synchronize_all_noexcept();  // cudaFreeHost waits for the device too
    if (!remove_allocation(p)) {
      logger().error("emulated deallocate_pinned of {} which was not allocated pinned", p);
      return;
    }
    ::operator delete (p, std::align_val_t{4096});
  }

  void register_host(void* p, std::size_t bytes, unsigned) override {
    SYNCMEM_EXPECTS(p != nullptr && bytes > 0, "register_host needs a non-null pointer and a nonzero size");
    std::unique_lock lock{registry_mutex_};
    const auto start = reinterpret_cast<std::uintptr_t>(p);
    auto next = allocations_.lower_bound(start);
    const bool overlaps_next = next != allocations_.end() && next->first < start + bytes;
    bool overlaps_prev = false;
    if (next != allocations_.begin()) {
      auto prev = std::prev(next);
      overlaps_prev = prev->first + prev->second.size > start;
    }
    SYNCMEM_EXPECTS(!overlaps_next && !overlaps_prev,
                    fmt::format("register_host: [{}, +{}) overlaps memory that is already registered or allocated "
                                "(cudaErrorHostMemoryAlreadyRegistered)",
                                p, bytes));
    allocations_.emplace(start, allocation{bytes, memory_kind::pinned_host, -1});
    allocation_count_.fetch_add(1);
  }

  void unregister_host(void* p) noexcept override {
    synchronize_all_noexcept();
    if (!remove_allocation(p)) logger().error("emulated unregister_host of {} which was not registered", p);
  }

  // ---- streams ---------------------------------------------------------------
  CUstream_st* create_stream(int index, bool, int) override {
    auto& d = device(index);
    auto s = std::make_shared<worker_stream>(index, max_delay_us_);
    std::lock_guard lock{d.streams_mutex};
    d.streams.emplace(s.get(), s);
    return reinterpret_cast<CUstream_st*>(s.get());
  }

  void destroy_stream(int index, CUstream_st* handle) noexcept override {
    auto* s = reinterpret_cast<worker_stream*>(handle);
    auto& d = device(index);
    std::shared_ptr<worker_stream> owned;
    {
      std::lock_guard lock{d.streams_mutex};
      if (auto it = d.streams.find(s); it != d.streams.end()) {
        owned = std::move(it->second);
        d.streams.erase(it);
      }
    }
    if (!owned) return;
    // Run what is queued before returning, as before, even when a device-wide
    // synchronize still holds the stream (it then destroys it).
    // A failure is one nobody asked about, as when a CUDA stream is destroyed.
    detail::ignore_failure("synchronizing an emulated stream before destroying it", [&] { owned->synchronize(); });
  }

  CUstream_st* default_stream(int index) override {
    auto& d = device(index);
    std::call_once(d.default_stream_once, [&] {
      auto* s = new worker_stream{index, max_delay_us_};
      std::lock_guard lock{d.streams_mutex};  // synchronize_device reads it under this lock
      d.default_stream = s;
    });
    return reinterpret_cast<CUstream_st*>(d.default_stream);
  }

  void synchronize_stream(int index, CUstream_st* s) override {
    auto& w = to_stream(s, index);
    refuse_in_capture(w, "synchronize");
    w.synchronize();
  }
  bool stream_ready(int index, CUstream_st* s) override {
    auto& w = to_stream(s, index);
    refuse_in_capture(w, "ready (a stream query)");
    return w.ready();
  }

  void launch_host_func(int index, CUstream_st* s, host_func fn, void* user_data) override {
    auto& w = to_stream(s, index);
    SYNCMEM_EXPECTS(!w.capturing(),
                    fmt::format("launch_host_func: the stream of emulated:{} is being captured, and a one-shot host "
                                "function cannot be recorded into a graph (use capture_host_func)",
                                index));
    w.enqueue([fn, user_data] { fn(user_data); });
  }

  // ---- capture -----------------------------------------------------------------
  // An executable graph: the operations recorded, enqueued in order at each launch.
  struct recorded_graph {
    int device;
    std::vector<std::function<void()>> ops;
  };

  bool stream_capturing(int index, CUstream_st* s) override { return to_stream(s, index).capturing(); }

  void begin_capture(int index, CUstream_st* s) override {
    auto& w = to_stream(s, index);
    SYNCMEM_EXPECTS(&w != device(index).default_stream,
                    fmt::format("begin_capture: the default stream of emulated:{} cannot be captured (as CUDA's legacy "
                                "default stream cannot)",
                                index));
    w.begin_capture();
  }

  void* end_capture(int index, CUstream_st* s) override {
    return new recorded_graph{index, to_stream(s, index).end_capture()};
  }

  void launch_graph(int index, void* graph, CUstream_st* s) override {
    auto& g = *static_cast<recorded_graph*>(graph);
    SYNCMEM_EXPECTS(g.device == index, fmt::format("launch: a graph of emulated:{} cannot be launched on a stream of "
                                                   "emulated:{}",
                                                   g.device, index));
    to_stream(s, index).enqueue_all(g.ops);
  }

  // The operations queued by earlier launches hold copies of what they need.
  void destroy_graph(int, void* graph) noexcept override { delete static_cast<recorded_graph*>(graph); }

  void capture_host_func(int index, CUstream_st* s, host_func fn, void* user_data, host_func release) override {
    // Released when the graph and the copies queued by its launches are gone,
    // as a CUDA user object; at once when this throws.
    std::shared_ptr<void> data{user_data, release};
    auto& w = to_stream(s, index);
    SYNCMEM_EXPECTS(w.capturing(),
                    fmt::format("capture_host_func: the stream of emulated:{} is not being captured", index));
    w.enqueue([fn, data] { fn(data.get()); });
  }

  void memcpy_async(void* dst, const void* src, std::size_t bytes, int index, CUstream_st* s) override {
    if (bytes == 0) return;
    check_range(dst, bytes, "destination");
    check_range(src, bytes, "source");
    to_stream(s, index).enqueue([dst, src, bytes] { std::memmove(dst, src, bytes); });
  }

  void memset_async(void* dst, int value, std::size_t bytes, int index, CUstream_st* s) override {
    if (bytes == 0) return;
    check_range(dst, bytes, "destination");
    to_stream(s, index).enqueue([dst, value, bytes] { std::memset(dst, value, bytes); });
  }

  // ---- events ----------------------------------------------------------------
  struct event_holder {
    std::shared_ptr<event_state> state;
  };

  CUevent_st* create_event(int index, bool timing, bool) override {
    (void)device(index);
    auto* holder = new event_holder{std::make_shared<event_state>()};
    holder->state->timing = timing;
    return reinterpret_cast<CUevent_st*>(holder);
  }

  void destroy_event(int, CUevent_st* e) noexcept override { delete reinterpret_cast<event_holder*>(e); }

  void record_event(int index, CUevent_st* e, CUstream_st* s) override {
    auto state = reinterpret_cast<event_holder*>(e)->state;
    auto& stream = to_stream(s, index);
    refuse_to_record(stream, "an event record");
    std::uint64_t generation = 0;
    {
      std::lock_guard lock{state->mutex};
      generation = ++state->recorded;
      state->pending.insert(generation);
    }
    stream.enqueue([state, generation] {
      {
        std::lock_guard lock{state->mutex};
        state->pending.erase(generation);
        if (generation > state->latest_completed) {
          state->latest_completed = generation;
          state->completed_at = std::chrono::steady_clock::now();
        }
      }
      state->completed_changed.notify_all();
    });
  }

  bool event_ready(int, CUevent_st* e) override {
    auto& state = *reinterpret_cast<event_holder*>(e)->state;
    std::lock_guard lock{state.mutex};
    return state.reached(state.recorded);
  }

  void synchronize_event(int, CUevent_st* e) override {
    auto& state = *reinterpret_cast<event_holder*>(e)->state;
    std::unique_lock lock{state.mutex};
    const auto target = state.recorded;
    state.completed_changed.wait(lock, [&] { return state.reached(target); });
  }

  void stream_wait_event(int index, CUstream_st* s, CUevent_st* e) override {
    auto state = reinterpret_cast<event_holder*>(e)->state;
    refuse_to_record(to_stream(s, index), "an event wait");
    std::uint64_t target = 0;
    {
      std::lock_guard lock{state->mutex};
      if (state->reached(state->recorded)) return;  // nothing to wait for
      target = state->recorded;
    }
    to_stream(s, index).enqueue([state, target] {
      std::unique_lock lock{state->mutex};
      state->completed_changed.wait(lock, [&] { return state->reached(target); });
    });
  }

  float elapsed_ms(int, CUevent_st* start, CUevent_st* end) override {
    auto& a = *reinterpret_cast<event_holder*>(start)->state;
    auto& b = *reinterpret_cast<event_holder*>(end)->state;
    std::chrono::steady_clock::time_point ta;
    std::chrono::steady_clock::time_point tb;
    {
      std::lock_guard lock{a.mutex};
      SYNCMEM_EXPECTS(a.recorded > 0 && a.reached(a.recorded) && a.latest_completed == a.recorded,
                      "elapsed_ms: the start event has not completed");
      ta = a.completed_at;
    }
    {
      std::lock_guard lock{b.mutex};
      SYNCMEM_EXPECTS(b.recorded > 0 && b.reached(b.recorded) && b.latest_completed == b.recorded,
                      "elapsed_ms: the end event has not completed");
      tb = b.completed_at;
    }
    return std::chrono::duration<float, std::milli>(tb - ta).count();
  }

  // ---- pointers --------------------------------------------------------------
  std::optional<pointer_attributes> pointer_info(const void* p) override {
    if (allocation_count_.load(std::memory_order_acquire) == 0) return std::nullopt;
    std::shared_lock lock{registry_mutex_};
    auto found = find(p);
    if (!found) return std::nullopt;
    pointer_attributes a;
    a.kind = found->second.kind;
    if (found->second.device >= 0) a.device = device_id::emulated(found->second.device);
    a.base = reinterpret_cast<const void*>(found->first);
    a.size = found->second.size;
    return a;
  }

  // ---- peers -----------------------------------------------------------------
  bool can_access_peer(int index, int peer) override {
    (void)device(index);
    (void)device(peer);
    return true;
  }
  void enable_peer_access(int index, int peer) override {
    (void)device(index);
    (void)device(peer);
  }

  // ---- virtual memory ----------------------------------------------------------
  std::size_t vmm_granularity(int index) override {
    (void)device(index);
    return vmm_page;
  }

  void* vmm_reserve(int index, std::size_t bytes) override {
    (void)device(index);
    SYNCMEM_EXPECTS(
        bytes > 0 && bytes % vmm_page == 0,
        fmt::format("vmm_reserve: {} bytes is not a positive multiple of the granularity {}", bytes, vmm_page));
    void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      SYNCMEM_SYSTEM_FAIL(errno, fmt::format("vmm_reserve: cannot reserve {} bytes of address space", bytes));
    add_allocation(p, {bytes, memory_kind::device, index});
    return p;
  }

  void vmm_free_address(int index, void* p, std::size_t bytes) noexcept override {
    (void)index;
    remove_allocation(p);
    ::munmap(p, bytes);
  }

  physical_handle vmm_create(int index, std::size_t bytes) override {
    auto& d = device(index);
    SYNCMEM_EXPECTS(
        bytes > 0 && bytes % vmm_page == 0,
        fmt::format("vmm_create: {} bytes is not a positive multiple of the granularity {}", bytes, vmm_page));
    if (!reserve_capacity(d, bytes)) return 0;
    const int fd = ::memfd_create("syncmem-emulated", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int error = errno;
      if (fd >= 0) ::close(fd);
      d.used.fetch_sub(bytes);
      // Lack of memory is an out-of-memory the caller reports; anything else (no file descriptors left) is not.
      if (error == ENOMEM || error == ENOSPC) return 0;
      SYNCMEM_SYSTEM_FAIL(error, fmt::format("vmm_create: cannot make a file of {} bytes to back the memory", bytes));
    }
    std::lock_guard lock{physical_mutex_};
    const physical_handle handle = next_handle_++;
    physical_.emplace(handle, physical_block{fd, index, bytes, true});
    return handle;
  }

  void vmm_release(int index, physical_handle h, std::size_t) noexcept override {
    std::lock_guard lock{physical_mutex_};
    auto it = physical_.find(h);
    if (it == physical_.end()) return;
    ::close(it->second.fd);
    device(index).used.fetch_sub(it->second.size);
    physical_.erase(it);
  }

  void vmm_map(int index, void* p, std::size_t bytes, physical_handle h) override {
    (void)index;
    physical_block* block = nullptr;
    {
      std::lock_guard lock{physical_mutex_};
      auto it = physical_.find(h);
      SYNCMEM_EXPECTS(it != physical_.end(), "vmm_map: unknown physical handle");
      block = &it->second;
    }
    SYNCMEM_EXPECTS(bytes == block->size, "vmm_map: the size must be that of the physical allocation");
    void* q = ::mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, block->fd, 0);
    if (q != p) SYNCMEM_SYSTEM_FAIL(errno, fmt::format("vmm_map: mmap at {} failed", p));
    if (block->fresh) {
      if (poison_.load()) std::memset(p, poison_byte, bytes);
      block->fresh = false;
    }
  }

  void vmm_unmap(int index, void* p, std::size_t bytes) noexcept override {
    // Work in flight may still use the pages.
    detail::ignore_failure("synchronizing an emulated device before an unmap", [&] { synchronize_device(index); });
    ::mmap(p, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  }

 private:
  static std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

  device_state& device(int index) {
    SYNCMEM_EXPECTS(
        index >= 0 && index < count_.load(std::memory_order_acquire),
        fmt::format("emulated device index {} is out of range: valid indices are 0..{}", index, count_.load() - 1));
    return *devices_[static_cast<std::size_t>(index)].load(std::memory_order_acquire);
  }

  worker_stream& to_stream(CUstream_st* s, int index) {
    auto* w = reinterpret_cast<worker_stream*>(s);
    SYNCMEM_EXPECTS(w != nullptr, "null emulated stream");
    SYNCMEM_EXPECTS(w->device() == index,
                    fmt::format("a stream of emulated:{} was used on emulated:{}", w->device(), index));
    return *w;
  }

  // What CUDA forbids on a capturing stream: refused, and the capture is
  // invalidated, as cudaErrorStreamCaptureUnsupported does.
  static void refuse_in_capture(worker_stream& w, const char* operation) {
    if (!w.capturing()) return;
    const auto why = fmt::format("{} of the capturing stream", operation);
    w.invalidate_capture(why);
    SYNCMEM_FAIL(
        fmt::format("{}: a stream of emulated:{} is being captured into a graph, where CUDA forbids this "
                    "(cudaErrorStreamCaptureUnsupported); the capture is invalidated",
                    operation, w.device()));
  }

  // What emulated devices cannot record into a graph yet: refused, the
  // capture left valid.
  static void refuse_to_record(worker_stream& w, const char* operation) {
    if (!w.capturing()) return;
    SYNCMEM_UNSUPPORTED(
        fmt::format("{} on a stream of emulated:{} that is being captured into a graph: emulated "
                    "devices cannot record it yet; nothing was recorded",
                    operation, w.device()));
  }

  static bool reserve_capacity(device_state& d, std::size_t size) {
    auto used = d.used.load();
    do {
      if (size > d.capacity || used > d.capacity - size) return false;
    } while (!d.used.compare_exchange_weak(used, used + size));
    return true;
  }

  void add_allocation(void* p, allocation a) {
    std::unique_lock lock{registry_mutex_};
    allocations_.emplace(reinterpret_cast<std::uintptr_t>(p), a);
    allocation_count_.fetch_add(1, std::memory_order_release);
  }

  std::optional<allocation> remove_allocation(void* p) noexcept {
    std::unique_lock lock{registry_mutex_};
    auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == allocations_.end()) return std::nullopt;
    auto a = it->second;
    allocations_.erase(it);
    allocation_count_.fetch_sub(1, std::memory_order_release);
    return a;
  }

  // The allocation containing p, under registry_mutex_.
  const std::pair<const std::uintptr_t, allocation>* find(const void* p) const {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    auto next = allocations_.upper_bound(address);
    if (next == allocations_.begin()) return nullptr;
    auto it = std::prev(next);
    if (address >= it->first + it->second.size) return nullptr;
    return &*it;
  }

  // A range that starts in a known allocation must end inside it.
  void check_range(const void* p, std::size_t bytes, const char* which) {
    if (allocation_count_.load(std::memory_order_acquire) == 0) return;
    SYNCMEM_EXPECTS(p != nullptr, fmt::format("emulated copy: the {} is null", which));
    std::shared_lock lock{registry_mutex_};
    const auto* found = find(p);
    if (found == nullptr) return;
    const auto offset = reinterpret_cast<std::uintptr_t>(p) - found->first;
    SYNCMEM_EXPECTS(bytes <= found->second.size - offset,
                    fmt::format("emulated copy: the {} range [{}, +{}) runs past the end of its allocation of {} "
                                "bytes at {:#x}",
                                which, p, bytes, found->second.size, found->first));
  }

  void free_now(int index, void* p) noexcept {
    auto removed = remove_allocation(p);
    if (!removed) return;
    device(index).used.fetch_sub(removed->size);
    ::operator delete (p, std::align_val_t{device_alignment});
  }

  // A block of at least `size` bytes for `stream` from the pool: one freed
  // earlier on that stream, a cached one, or a new one (after releasing the
  // cache if the device is full); its size goes to `block`. Null when the device
  // has no room. Under the pool's mutex.
  void* take_pool_block(memory_pool& pool, const void* stream, std::size_t size, std::size_t& block) {
    // Best fit up to twice the size: CUDA's pools split blocks, and without
    // this a workload of many sizes caches blocks that never fit again.
    const std::size_t largest = size > std::numeric_limits<std::size_t>::max() / 2 ? size : size * 2;
    if (auto it = pool.pending_by_stream.lower_bound({stream, size});
        it != pool.pending_by_stream.end() && it->first.first == stream && it->first.second <= largest) {
      void* p = it->second;
      block = it->first.second;
      pool.drop_pending(p);
      return p;
    }
    if (auto it = pool.cached.lower_bound(size); it != pool.cached.end() && it->first <= largest) {
      void* p = it->second;
      block = it->first;
      pool.cached_bytes -= block;
      pool.cached.erase(it);
      return p;
    }
    block = size;
    void* p = allocate(pool.device, size);
    if (p == nullptr && pool.cached_bytes > 0) {  // give the cache back and try again, as CUDA's pools do
      release_cached(pool, 0);
      p = allocate(pool.device, size);
    }
    if (p == nullptr) return nullptr;
    pool.usage.reserved += size;
    pool.usage.reserved_high = std::max(pool.usage.reserved_high, pool.usage.reserved);
    return p;
  }

  // Waits for every stream of the device without taking their failures,
  // which their own synchronize reports.
  void wait_device_idle(int index) {
    for_each_stream(index, [](worker_stream& s) { s.wait_idle(); });
  }

  // Frees cached blocks of a pool, largest first, until it caches at most
  // `keep` bytes. Under the pool's mutex.
  void release_cached(memory_pool& pool, std::size_t keep) noexcept {
    while (pool.cached_bytes > keep && !pool.cached.empty()) {
      auto it = std::prev(pool.cached.end());
      pool.cached_bytes -= it->first;
      pool.usage.reserved -= it->first;
      free_now(pool.device, it->second);
      pool.cached.erase(it);
    }
  }

  void synchronize_all_noexcept() noexcept {
    for (int i = 0; i < count_.load(); ++i) {
      detail::ignore_failure("synchronizing an emulated device", [&] { synchronize_device(i); });
    }
  }

  std::mutex config_mutex_;
  std::atomic<int> count_{0};
  std::size_t memory_per_device_ = std::size_t{2} << 30;
  std::atomic<std::int64_t> max_delay_us_{0};
  std::atomic<bool> poison_{true};
  std::string env_problem_;
  std::array<std::atomic<device_state*>, max_devices> devices_{};

  std::shared_mutex registry_mutex_;
  std::map<std::uintptr_t, allocation> allocations_;
  std::atomic<std::size_t> allocation_count_{0};

  std::mutex physical_mutex_;
  std::unordered_map<physical_handle, physical_block> physical_;
  physical_handle next_handle_ = 1;
};

backend_impl& instance() {
  static auto* const impl = new backend_impl{};  // never destroyed: see device_state
  return *impl;
}

}  // namespace
}  // namespace syncmem::detail::emulated

namespace syncmem {

namespace detail {
backend& emulated_backend() noexcept { return emulated::instance(); }
}  // namespace detail

void enable_emulated_devices(const emulated_options& options) { detail::emulated::instance().configure(options); }
emulated_options emulated_device_options() { return detail::emulated::instance().options(); }
void set_emulated_delay(std::chrono::microseconds max_delay) { detail::emulated::instance().set_delay(max_delay); }
void set_emulated_poison(bool poison) { detail::emulated::instance().set_poison(poison); }

}  // namespace syncmem
