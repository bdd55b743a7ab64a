#include "syncmem/graph.hpp"

#include <memory>
#include <utility>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/capture_registry.hpp"
#include "core/ignored_failure.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/stream.hpp"

namespace syncmem {

void begin_capture(stream_view s) { begin_capture(s, graph_pool{}); }

void begin_capture(stream_view s, const graph_pool& pool) {
  SYNCMEM_EXPECTS(!s.is_default(),
                  fmt::format("begin_capture: the default stream of {} cannot be captured (CUDA cannot capture its "
                              "legacy default stream): capture a syncmem::stream",
                              to_string(s.device())));
  device_guard guard{s.device()};
  auto& backend = detail::backend_for(s.device());
  SYNCMEM_EXPECTS(!backend.stream_capturing(s.device().index(), s.handle()),
                  fmt::format("begin_capture: the stream of {} is already being captured", to_string(s.device())));
  detail::require_graphs(backend, "begin_capture").begin_capture(s.device().index(), s.handle());
  detail::capture_began(s, detail::graph_pool_access::state(pool));
}

graph end_capture(stream_view s) {
  device_guard guard{s.device()};
  auto& backend = detail::backend_for(s.device());
  SYNCMEM_EXPECTS(backend.stream_capturing(s.device().index(), s.handle()),
                  fmt::format("end_capture: the stream of {} is not being captured (begin_capture was not called on "
                              "it, or its capture has ended)",
                              to_string(s.device())));
  // The capture is over even when ending it throws (invalidated); its pool
  // then goes with what it reserved, unless other graphs or handles hold it.
  auto pool = detail::capture_ended(s);
  // What waited for the captures to end may go once the backend has ended this one.
  struct when_ended {
    when_ended() = default;
    when_ended(const when_ended&) = delete;
    when_ended& operator=(const when_ended&) = delete;
    ~when_ended() { detail::release_held_after_captures(); }
  } release_held;
  const auto handle = detail::require_graphs(backend, "end_capture").end_capture(s.device().index(), s.handle());
  return graph{s.device(), detail::pointer_of<void*>(handle), std::move(pool)};
}

bool is_capturing(stream_view s) {
  device_guard guard{s.device()};
  return detail::backend_for(s.device()).stream_capturing(s.device().index(), s.handle());
}

graph::~graph() { reset(); }

graph::graph(graph&& other) noexcept
    : device_{other.device_}, handle_{std::exchange(other.handle_, nullptr)}, pool_{std::move(other.pool_)} {}

graph& graph::operator=(graph&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
    pool_ = std::move(other.pool_);
  }
  return *this;
}

graph_pool graph::pool() const {
  SYNCMEM_EXPECTS(handle_ != nullptr && pool_ != nullptr,
                  "graph::pool: the graph is empty (default-made or moved from)");
  return detail::graph_pool_access::make(pool_);
}

void graph::launch(stream_view s) const {
  SYNCMEM_EXPECTS(handle_ != nullptr, "graph::launch: the graph is empty (default-made or moved from)");
  SYNCMEM_EXPECTS(s.device() == device_,
                  fmt::format("graph::launch: a graph captured on {} cannot be launched on a stream of {}",
                              to_string(device_), to_string(s.device())));
  device_guard guard{device_};
  auto& backend = detail::backend_for(device_);
  // Not yet: CUDA's support for a launch inside a capture is not verified, and both kinds must agree.
  SYNCMEM_EXPECTS(!backend.stream_capturing(device_.index(), s.handle()),
                  fmt::format("graph::launch: the stream of {} is being captured; launching a graph inside a capture "
                              "is not supported",
                              to_string(device_)));
  detail::require_graphs(backend, "launch_graph")
      .launch_graph(device_.index(), detail::handle_of<detail::graph_handle>(handle_), s.handle());
}

namespace {

// A graph's executable and its pool, destroyed in that order: the pool's
// memory goes once no launch can use it (see private_pool).
struct graph_remains {
  device_id device;
  void* handle;
  std::shared_ptr<detail::graph_pool_state> pool;
  graph_remains(device_id d, void* h, std::shared_ptr<detail::graph_pool_state> p)
      : device{d}, handle{h}, pool{std::move(p)} {}
  graph_remains(const graph_remains&) = delete;
  graph_remains& operator=(const graph_remains&) = delete;
  ~graph_remains() {
    try {
      device_guard guard{device};
      if (auto* const graphs = detail::backend_for(device).graphs()) {
        graphs->destroy_graph(device.index(), detail::handle_of<detail::graph_handle>(handle));
      }
    } catch (...) {
      // the device is gone; nothing to release
      detail::log_ignored("destroying a graph");
    }
  }
};

}  // namespace

void graph::reset() noexcept {
  if (handle_ == nullptr) return;
  void* const handle = std::exchange(handle_, nullptr);
  auto pool = std::move(pool_);
  std::shared_ptr<graph_remains> remains;
  try {
    remains = std::make_shared<graph_remains>(device_, handle, std::move(pool));
  } catch (...) {
    graph_remains now{device_, handle, std::move(pool)};  // no memory to defer it: destroyed now
    return;
  }
  // Not while a stream is being captured: CUDA refuses to destroy a graph
  // then, and freeing the pool's memory would invalidate the capture.
  detail::release_after_captures(std::move(remains));
}

}  // namespace syncmem
