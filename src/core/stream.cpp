#include "syncmem/stream.hpp"

#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/capture_registry.hpp"
#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "core/stream_observers.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"

namespace syncmem {

namespace {

// Liveness tokens of the streams syncmem owns, by handle.
struct liveness_registry {
  std::mutex mutex;
  std::unordered_map<stream_handle, std::weak_ptr<void>> tokens;
};

liveness_registry& registry() {
  static auto* const r = new liveness_registry{};  // never destroyed: streams may die after main()
  return *r;
}

// A stream destroyed while captured: ends the capture and drops its graph,
// since neither a synchronize nor cudaStreamDestroy may meet an open capture.
void abandon_capture(device_id device, stream_handle handle) noexcept {
  try {
    device_guard guard{device};
    auto& backend = detail::backend_for(device);
    if (!backend.stream_capturing(device.index(), handle)) return;
    detail::logger().error(
        "a syncmem::stream of {} was destroyed while being captured: the capture is discarded (call end_capture "
        "before the stream goes)",
        to_string(device));
    const auto pool = detail::capture_ended(detail::stream_access::make(device, handle));
    auto& graphs = detail::require_graphs(backend, "end_capture");
    graphs.destroy_graph(device.index(), graphs.end_capture(device.index(), handle));
  } catch (...) {
    // an invalidated capture leaves no graph to destroy
    detail::log_ignored("discarding the capture of a destroyed stream");
  }
}

}  // namespace

std::weak_ptr<void> detail::stream_liveness(stream_view s) {
  auto& r = registry();
  std::lock_guard lock{r.mutex};
  auto it = r.tokens.find(s.handle());
  return it == r.tokens.end() ? std::weak_ptr<void>{} : it->second;
}

void detail::stream_identity::remember(stream_view s) {
  device_ = s.device();
  handle_ = s.handle();
  token_ = stream_liveness(s);
  owned_ = !token_.expired();
  known_ = true;
}

void detail::stream_identity::forget() noexcept {
  known_ = false;
  owned_ = false;
  handle_ = stream_handle{};
  token_.reset();
}

stream_view default_stream(device_id device) {
  check_device(device);
  return detail::stream_access::make(device, detail::backend_for(device).default_stream(device.index()));
}

stream_view default_stream() { return default_stream(current_device()); }

bool stream_view::is_default() const { return handle_ == detail::backend_for(device_).default_stream(device_.index()); }

void stream_view::synchronize() const {
  device_guard guard{device_};
  detail::backend_for(device_).synchronize_stream(device_.index(), handle_);
}

bool stream_view::ready() const {
  device_guard guard{device_};
  return detail::backend_for(device_).stream_ready(device_.index(), handle_);
}

void stream_view::wait(const event& e) const {
  SYNCMEM_EXPECTS(e.device() == device_,
                  fmt::format("a stream of {} cannot wait on an event of {}: both must belong to one device",
                              to_string(device_), to_string(e.device())));
  device_guard guard{device_};
  detail::backend_for(device_).stream_wait_event(device_.index(), handle_, e.handle());
}

void stream_view::launch_host_func(std::function<void()> fn) const {
  SYNCMEM_EXPECTS(static_cast<bool>(fn), "launch_host_func: the function is empty");
  auto owned = std::make_unique<std::function<void()>>(std::move(fn));
  device_guard guard{device_};
  auto& backend = detail::backend_for(device_);
  if (backend.stream_capturing(device_.index(), handle_)) {
    // Recorded into a graph: called at every launch, freed with the graph.
    auto call = [](void* data) { (*static_cast<std::function<void()>*>(data))(); };
    auto release = [](void* data) { delete static_cast<std::function<void()>*>(data); };
    detail::require_graphs(backend, "capture_host_func")
        .capture_host_func(device_.index(), handle_, call, owned.release(), release);
    return;
  }
  auto trampoline = [](void* data) {
    std::unique_ptr<std::function<void()>> f{static_cast<std::function<void()>*>(data)};
    (*f)();
  };
  backend.launch_host_func(device_.index(), handle_, trampoline, owned.get());
  (void)owned.release();  // the trampoline owns it now
}

stream::stream(device_id device, stream_options options) : device_{device} {
  device_guard guard{device};
  handle_ = detail::backend_for(device).create_stream(device.index(), options.non_blocking, options.priority);
  alive_ = std::make_shared<int>(0);
  auto& r = registry();
  std::lock_guard lock{r.mutex};
  r.tokens[handle_] = alive_;
  valid_ = true;
}

stream::stream() : stream{current_device()} {}

stream::~stream() { reset(); }

stream::stream(stream&& other) noexcept
    : device_{other.device_},
      handle_{std::exchange(other.handle_, stream_handle{})},
      alive_{std::move(other.alive_)},
      valid_{std::exchange(other.valid_, false)} {}

stream& stream::operator=(stream&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, stream_handle{});
    alive_ = std::move(other.alive_);
    valid_ = std::exchange(other.valid_, false);
  }
  return *this;
}

void stream::reset() noexcept {
  if (!valid_) return;
  valid_ = false;
  abandon_capture(device_, handle_);  // first: observers may enqueue on the stream
  detail::notify_stream_destroying(device_, handle_);
  try {
    device_guard guard{device_};
    auto& backend = detail::backend_for(device_);
    try {
      backend.synchronize_stream(device_.index(), handle_);
    } catch (...) {
      // a failure was reported to whoever waited; destroy anyway
      detail::log_ignored("synchronizing a stream before destroying it");
    }
    {
      auto& r = registry();
      std::lock_guard lock{r.mutex};
      if (auto it = r.tokens.find(handle_); it != r.tokens.end() && it->second.lock() == alive_) r.tokens.erase(it);
    }
    alive_.reset();
    backend.destroy_stream(device_.index(), handle_);
  } catch (...) {
    // the device is gone; nothing to release
    detail::log_ignored("destroying a stream");
  }
  handle_ = stream_handle{};
}

void stream::throw_moved_from() { SYNCMEM_FAIL("use of a moved-from syncmem::stream"); }

void stream::wait(const event& e) const { view().wait(e); }

}  // namespace syncmem
