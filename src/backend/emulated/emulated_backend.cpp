// Emulated devices: the core operations (see emulated_backend.hpp).

#include "backend/emulated/emulated_backend.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "backend/emulated/capture_graph.hpp"
#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::emulated {
namespace {

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

struct event_holder {
  std::shared_ptr<event_state> state;
};

// An emulated stream or event travels through the backend interface as an
// opaque handle that only this backend reads.
stream_handle native_of(worker_stream* s) noexcept { return handle_of<stream_handle>(s); }
worker_stream* worker_of(stream_handle s) noexcept { return pointer_of<worker_stream*>(s); }
event_handle native_of(event_holder* e) noexcept { return handle_of<event_handle>(e); }
event_holder* holder_of(event_handle e) noexcept { return pointer_of<event_holder*>(e); }

}  // namespace

emulated_backend::emulated_backend() {
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

void emulated_backend::configure(const emulated_options& options) {
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

emulated_options emulated_backend::options() {
  std::lock_guard lock{config_mutex_};
  emulated_options o;
  o.device_count = count_.load();
  o.memory_per_device = memory_per_device_;
  o.max_delay = std::chrono::microseconds{max_delay_us_.load()};
  o.poison = poison_.load();
  return o;
}

void emulated_backend::set_delay(std::chrono::microseconds d) {
  SYNCMEM_EXPECTS(d.count() >= 0, "the emulated delay must not be negative");
  max_delay_us_.store(d.count());
}

const backend_traits& emulated_backend::traits() const noexcept {
  static constexpr backend_traits t{
      .keeps_current_device = true, .pointer_info_is_local = true, .device_memory_is_host_memory = true};
  return t;
}

namespace {
thread_local int current_emulated_device = 0;
}  // namespace

void emulated_backend::make_current(int index) {
  (void)device(index);
  current_emulated_device = index;
}

int emulated_backend::current_index() { return current_emulated_device; }

namespace {
std::string current_device_fault(int index, const char* operation) {
  return fmt::format(
      "{} on emulated:{} while emulated:{} is this thread's current device: a device_guard for emulated:{} is "
      "missing (on a GPU the call would act on the current device)",
      operation, index, current_emulated_device, index);
}
}  // namespace

void emulated_backend::require_current(int index, const char* operation) {
  if (index != current_emulated_device) [[unlikely]] {
    current_device_faults.fetch_add(1, std::memory_order_relaxed);  // counted also where the error is caught
    SYNCMEM_FAIL(current_device_fault(index, operation));
  }
}

void emulated_backend::expect_current(int index, const char* operation) noexcept {
  if (index == current_emulated_device) [[likely]]
    return;
  current_device_faults.fetch_add(1, std::memory_order_relaxed);
  detail::ignore_failure("reporting a missing device_guard",
                         [&] { logger().error("{}", current_device_fault(index, operation)); });
}

std::string emulated_backend::why_no_devices() {
  if (!env_problem_.empty()) return env_problem_;
  return "emulated devices are not enabled (set SYNCMEM_EMULATED_DEVICES=N or call "
         "syncmem::enable_emulated_devices)";
}

device_properties emulated_backend::properties(int index) {
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

memory_info emulated_backend::memory(int index) {
  auto& d = device(index);
  require_current(index, "memory (cudaMemGetInfo)");
  const auto used = std::min(d.used.load(), d.capacity);
  return {d.capacity - used, d.capacity};
}

void emulated_backend::synchronize_device(int index) {
  require_current(index, "synchronize_device (cudaDeviceSynchronize)");
  refuse_in_any_capture(index, "synchronize_device (cudaDeviceSynchronize)");
  wait_for_device(index);
}

void emulated_backend::refuse_in_any_capture(int index, const char* operation) {
  for_each_stream(index, [&](worker_stream& w) { refuse_in_capture(w, operation); });
}

void emulated_backend::wait_for_device(int index) {
  for_each_stream(index, [](worker_stream& s) { s.synchronize(); });
}

void* emulated_backend::allocate(int index, std::size_t bytes) {
  auto& d = device(index);
  require_current(index, "allocate (cudaMalloc)");
  std::size_t size = round_up(std::max<std::size_t>(bytes, 1), device_alignment);
  size = round_up(size, device_alignment_for(size));
  if (!reserve_capacity(d, size)) return nullptr;
  void* p = size >= page_aligned_from ? ipc_.allocate_shareable(size) : nullptr;
  if (p == nullptr) p = ::operator new (size, std::align_val_t{device_alignment_for(size)}, std::nothrow);
  if (p == nullptr) {
    d.used.fetch_sub(size);
    return nullptr;
  }
  if (poison_.load()) std::memset(p, poison_byte, size);
  add_allocation(p, {size, memory_kind::device, index});
  return p;
}

void emulated_backend::deallocate(int index, void* p, std::size_t) noexcept {
  if (p == nullptr) return;
  expect_current(index, "deallocate (cudaFree)");
  // Like cudaFree, wait for the device first: work in flight may use it. An
  // earlier failure is reported by its own synchronize.
  try {
    refuse_in_any_capture(index, "deallocate (cudaFree)");
  } catch (...) {
    log_ignored("freeing during a capture");  // as cudaFree fails then: the memory stays allocated
    return;
  }
  detail::ignore_failure("synchronizing an emulated device before a free", [&] { wait_for_device(index); });
  auto removed = remove_allocation(p);
  if (!removed) {
    logger().error("emulated deallocate of {} which emulated:{} did not allocate", p, index);
    return;
  }
  device(index).used.fetch_sub(removed->size);
  if (!ipc_.free_shareable(p, removed->size)) {
    ::operator delete (p, std::align_val_t{device_alignment_for(removed->size)});
  }
}

void* emulated_backend::allocate_pinned(std::size_t bytes, unsigned) {
  const std::size_t size = round_up(std::max<std::size_t>(bytes, 1), 4096);
  void* p = ::operator new (size, std::align_val_t{4096}, std::nothrow);
  if (p == nullptr) return nullptr;
  if (poison_.load()) std::memset(p, poison_byte, size);
  add_allocation(p, {size, memory_kind::pinned_host, -1});
  return p;
}

void emulated_backend::deallocate_pinned(void* p, std::size_t) noexcept {
  if (p == nullptr) return;
  synchronize_all_noexcept();  // cudaFreeHost waits for the device too
  if (!remove_allocation(p)) {
    logger().error("emulated deallocate_pinned of {} which was not allocated pinned", p);
    return;
  }
  ::operator delete (p, std::align_val_t{4096});
}

void emulated_backend::register_host(void* p, std::size_t bytes, unsigned) {
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

void emulated_backend::unregister_host(void* p) noexcept {
  synchronize_all_noexcept();
  if (!remove_allocation(p)) logger().error("emulated unregister_host of {} which was not registered", p);
}

stream_handle emulated_backend::create_stream(int index, bool, int) {
  auto& d = device(index);
  require_current(index, "create_stream (cudaStreamCreate)");
  auto s = std::make_shared<worker_stream>(index, max_delay_us_);
  std::lock_guard lock{d.streams_mutex};
  d.streams.emplace(s.get(), s);
  return native_of(s.get());
}

void emulated_backend::destroy_stream(int index, stream_handle handle) noexcept {
  expect_current(index, "destroy_stream (cudaStreamDestroy)");
  auto* s = worker_of(handle);
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

stream_handle emulated_backend::default_stream(int index) {
  auto& d = device(index);
  std::call_once(d.default_stream_once, [&] {
    auto* s = new worker_stream{index, max_delay_us_};
    std::lock_guard lock{d.streams_mutex};  // synchronize_device reads it under this lock
    d.default_stream.store(s, std::memory_order_release);
  });
  return native_of(d.default_stream.load(std::memory_order_acquire));
}

void emulated_backend::synchronize_stream(int index, stream_handle s) {
  auto& w = to_stream(s, index);
  refuse_in_capture(w, "synchronize");
  w.synchronize();
}

bool emulated_backend::stream_ready(int index, stream_handle s) {
  auto& w = to_stream(s, index);
  refuse_in_capture(w, "ready (a stream query)");
  return w.ready();
}

void emulated_backend::launch_host_func(int index, stream_handle s, host_func fn, void* user_data) {
  auto& w = to_stream(s, index);
  SYNCMEM_EXPECTS(!w.capturing(),
                  fmt::format("launch_host_func: the stream of emulated:{} is being captured, and a one-shot host "
                              "function cannot be recorded into a graph (use capture_host_func)",
                              index));
  w.enqueue([fn, user_data] { fn(user_data); });
}

void emulated_backend::memcpy_async(void* dst, const void* src, std::size_t bytes, int index, stream_handle s) {
  if (bytes == 0) return;
  check_range(dst, bytes, "destination");
  check_range(src, bytes, "source");
  to_stream(s, index).enqueue([dst, src, bytes] { std::memmove(dst, src, bytes); });
}

void emulated_backend::memset_async(void* dst, int value, std::size_t bytes, int index, stream_handle s) {
  if (bytes == 0) return;
  check_range(dst, bytes, "destination");
  to_stream(s, index).enqueue([dst, value, bytes] { std::memset(dst, value, bytes); });
}

void emulated_backend::destroy_event(int, event_handle e) noexcept { delete holder_of(e); }

event_handle emulated_backend::create_event(int index, bool timing, bool) {
  (void)device(index);
  require_current(index, "create_event (cudaEventCreate)");
  auto* holder = new event_holder{std::make_shared<event_state>()};
  holder->state->timing = timing;
  return native_of(holder);
}

void emulated_backend::record_event(int index, event_handle e, stream_handle s) {
  auto state = holder_of(e)->state;
  auto& stream = to_stream(s, index);
  // In a capture a record is no work: it marks where a wait for it joins the graph.
  if (auto g = stream.capture()) {
    auto nodes = g->frontier(&stream);
    std::lock_guard lock{state->mutex};
    state->captured_in = std::move(g);
    state->captured_after = std::move(nodes);
    return;
  }
  std::uint64_t generation = 0;
  {
    std::lock_guard lock{state->mutex};
    state->captured_in.reset();
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

bool emulated_backend::event_ready(int, event_handle e) {
  auto& state = *holder_of(e)->state;
  std::lock_guard lock{state.mutex};
  return state.reached(state.recorded);
}

void emulated_backend::synchronize_event(int, event_handle e) {
  auto& state = *holder_of(e)->state;
  std::unique_lock lock{state.mutex};
  const auto target = state.recorded;
  state.completed_changed.wait(lock, [&] { return state.reached(target); });
}

void emulated_backend::stream_wait_event(int index, stream_handle s, event_handle e) {
  auto state = holder_of(e)->state;
  auto& stream = to_stream(s, index);
  std::shared_ptr<capture_graph> captured;
  std::vector<std::size_t> after;
  {
    std::lock_guard lock{state->mutex};
    captured = state->captured_in;
    after = state->captured_after;
  }
  if (captured) {
    stream.join(captured, after);  // forks `s` into the capture, or joins two of its streams
    return;
  }
  refuse_to_record(stream, "an event wait (for an event recorded outside the capture)");
  std::uint64_t target = 0;
  {
    std::lock_guard lock{state->mutex};
    if (state->reached(state->recorded)) return;  // nothing to wait for
    target = state->recorded;
  }
  stream.enqueue([state, target] {
    std::unique_lock lock{state->mutex};
    state->completed_changed.wait(lock, [&] { return state->reached(target); });
  });
}

float emulated_backend::elapsed_ms(int, event_handle start, event_handle end) {
  auto& a = *holder_of(start)->state;
  auto& b = *holder_of(end)->state;
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

std::optional<pointer_attributes> emulated_backend::pointer_info(const void* p) {
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

bool emulated_backend::can_access_peer(int index, int peer) {
  (void)device(index);
  (void)device(peer);
  return true;
}

void emulated_backend::enable_peer_access(int index, int peer) {
  (void)device(index);
  require_current(index, "enable_peer_access (cudaDeviceEnablePeerAccess)");
  (void)device(peer);
}

device_state& emulated_backend::device(int index) {
  SYNCMEM_EXPECTS(!forked_after_workers_started(),
                  "emulated devices cannot be used in a process forked after they were used (the fork has none of "
                  "their threads), as CUDA devices cannot: start the process with spawn or forkserver, or exec");
  SYNCMEM_EXPECTS(
      index >= 0 && index < count_.load(std::memory_order_acquire),
      fmt::format("emulated device index {} is out of range: valid indices are 0..{}", index, count_.load() - 1));
  return *devices_[static_cast<std::size_t>(index)].load(std::memory_order_acquire);
}

worker_stream& emulated_backend::to_stream(stream_handle s, int index) {
  auto* w = worker_of(s);
  SYNCMEM_EXPECTS(w != nullptr, "null emulated stream");
  SYNCMEM_EXPECTS(w->device() == index,
                  fmt::format("a stream of emulated:{} was used on emulated:{}", w->device(), index));
  // CUDA's legacy default stream is the current device's.
  if (w == device(index).default_stream.load(std::memory_order_acquire)) {
    require_current(index, "work on the default stream");
  }
  return *w;
}

void emulated_backend::refuse_in_capture(worker_stream& w, const char* operation) {
  if (!w.capturing()) return;
  const auto why = fmt::format("{} of the capturing stream", operation);
  w.invalidate_capture(why);
  SYNCMEM_FAIL(
      fmt::format("{}: a stream of emulated:{} is being captured into a graph, where CUDA forbids this "
                  "(cudaErrorStreamCaptureUnsupported); the capture is invalidated",
                  operation, w.device()));
}

void emulated_backend::refuse_to_record(worker_stream& w, const char* operation) {
  if (!w.capturing()) return;
  SYNCMEM_UNSUPPORTED(
      fmt::format("{} on a stream of emulated:{} that is being captured into a graph: emulated "
                  "devices cannot record it yet; nothing was recorded",
                  operation, w.device()));
}

bool emulated_backend::reserve_capacity(device_state& d, std::size_t size) {
  auto used = d.used.load();
  do {
    if (size > d.capacity || used > d.capacity - size) return false;
  } while (!d.used.compare_exchange_weak(used, used + size));
  return true;
}

void emulated_backend::add_allocation(void* p, allocation a) {
  std::unique_lock lock{registry_mutex_};
  allocations_.emplace(reinterpret_cast<std::uintptr_t>(p), a);
  allocation_count_.fetch_add(1, std::memory_order_release);
}

std::optional<allocation> emulated_backend::remove_allocation(void* p) noexcept {
  std::unique_lock lock{registry_mutex_};
  auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == allocations_.end()) return std::nullopt;
  auto a = it->second;
  allocations_.erase(it);
  allocation_count_.fetch_sub(1, std::memory_order_release);
  return a;
}

std::optional<std::pair<std::uintptr_t, allocation>> emulated_backend::allocation_containing(const void* p) {
  std::shared_lock lock{registry_mutex_};
  const auto* found = find(p);
  if (found == nullptr) return std::nullopt;
  return std::pair{found->first, found->second};
}

const std::pair<const std::uintptr_t, allocation>* emulated_backend::find(const void* p) const {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  auto next = allocations_.upper_bound(address);
  if (next == allocations_.begin()) return nullptr;
  auto it = std::prev(next);
  if (address >= it->first + it->second.size) return nullptr;
  return &*it;
}

void emulated_backend::check_range(const void* p, std::size_t bytes, const char* which) {
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

void emulated_backend::free_now(int index, void* p) noexcept {
  auto removed = remove_allocation(p);
  if (!removed) return;
  device(index).used.fetch_sub(removed->size);
  if (!ipc_.free_shareable(p, removed->size)) {
    ::operator delete (p, std::align_val_t{device_alignment_for(removed->size)});
  }
}

void emulated_backend::wait_device_idle(int index) {
  for_each_stream(index, [](worker_stream& s) { s.wait_idle(); });
}

void emulated_backend::synchronize_all_noexcept() noexcept {
  for (int i = 0; i < count_.load(); ++i) {
    detail::ignore_failure("synchronizing an emulated device", [&] { wait_for_device(i); });
  }
}

emulated_backend& instance() {
  static auto* const impl = new emulated_backend{};  // never destroyed: see device_state
  return *impl;
}

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
