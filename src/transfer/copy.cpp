// The engine's public face (copy.hpp): transfers, the options and the staging
// resources, the engine-wide state, and the entry points, which classify a
// copy (copy_classification.cpp) and take its path (copy_paths.cpp).

#include "syncmem/copy.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/event_pool.hpp"
#include "core/log.hpp"
#include "core/release_at_exit.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "transfer/copy_internal.hpp"
#include "transfer/copy_paths.hpp"

namespace syncmem {

namespace detail {

struct transfer_state {
  std::optional<event> done;                     // recorded after the copy's last device-side access
  std::shared_ptr<const transfer_state> shared;  // or the state of a batch this transfer is part of
  [[nodiscard]] const event* done_event() const noexcept {
    if (done) return &*done;
    return shared && shared->done ? &*shared->done : nullptr;
  }
  transfer_state() = default;
  transfer_state(const transfer_state&) = delete;
  transfer_state& operator=(const transfer_state&) = delete;
  ~transfer_state() {
    if (done) event_pool::instance().release(std::move(*done));
  }
};

struct transfer_access {
  static transfer make(std::unique_ptr<transfer_state> state, copy_path path) {
    transfer t;
    t.state_ = std::move(state);
    t.path_ = path;
    return t;
  }
  static transfer share(transfer& t) {
    if (!t.state_) return make(nullptr, t.path_);
    if (!t.state_->shared) {
      std::shared_ptr<const transfer_state> whole{std::move(t.state_)};
      t.state_ = std::make_unique<transfer_state>();
      t.state_->shared = whole;
    }
    auto state = std::make_unique<transfer_state>();
    state->shared = t.state_->shared;
    return make(std::move(state), t.path_);
  }
  static void finish_completed(transfer& t) noexcept {
    if (t.state_ && t.state_->done) {
      event_pool::instance().release_completed(std::move(*t.state_->done));
      t.state_->done.reset();
    }
    t = transfer{};
  }
};

}  // namespace detail

namespace {

using detail::event_pool;
using detail::transfer_state;

// ---- engine-wide state ---------------------------------------------------------

struct engine {
  std::mutex mutex;
  copy_options options;
  std::map<device_id, stream*> streams;  // never destroyed: copies may run after main()
  std::map<std::pair<device_id, device_id>, bool> peers;
  detail::per_kind<std::once_flag> staging_once;
  detail::per_kind<mr::caching_pinned_resource*> staging{};
  bool peer_warning_given = false;
};

engine& the_engine() {
  static auto* const e = new engine{};  // never destroyed, like what it holds
  return *e;
}

void check_options(const copy_options& o) {
  SYNCMEM_EXPECTS(o.min_chunk >= 1, "copy_options::min_chunk is 0: it must be at least 1 byte");
  SYNCMEM_EXPECTS(
      o.max_chunk >= o.min_chunk,
      fmt::format("copy_options::max_chunk is {}: it must be at least min_chunk ({})", o.max_chunk, o.min_chunk));
  SYNCMEM_EXPECTS(o.staging_buffers >= 1 && o.staging_buffers <= 64,
                  fmt::format("copy_options::staging_buffers is {}: valid range is 1..64", o.staging_buffers));
  SYNCMEM_EXPECTS(o.host_threads >= 0 && o.host_threads <= 64,
                  fmt::format("copy_options::host_threads is {}: valid range is 0..64 (0: automatic)", o.host_threads));
  SYNCMEM_EXPECTS(o.batch_kernel_max_copy < (std::size_t{1} << 32),
                  fmt::format("copy_options::batch_kernel_max_copy is {}: it must be below 4 GiB (0: never)",
                              o.batch_kernel_max_copy));
}

std::unique_ptr<transfer_state> done_after(stream_view s) {
  event e = event_pool::instance().acquire(s.device());
  e.record(s);
  auto state = std::make_unique<transfer_state>();
  state->done = std::move(e);
  return state;
}

}  // namespace

// ---- engine-wide state ----

// A stream of the engine's own on `device`, for the half of a staged peer copy
// that does not run on the caller's stream.
stream_view detail::engine_stream_of(device_id device) {
  auto& e = the_engine();
  std::lock_guard lock{e.mutex};
  auto& s = e.streams[device];
  if (s == nullptr) s = new stream{device};
  return s->view();
}

// Whether `a` and `b` can reach each other's memory; enables peer access in
// both directions the first time.
bool detail::peer_usable(device_id a, device_id b) {
  auto& e = the_engine();
  const auto key = std::minmax(a, b);
  std::lock_guard lock{e.mutex};
  if (auto it = e.peers.find(key); it != e.peers.end()) return it->second;
  bool usable = false;
  try {
    auto& backend = detail::backend_for(a);
    bool can = false;
    {
      device_guard guard{a};
      can = backend.can_access_peer(a.index(), b.index());
    }
    if (can) {
      device_guard guard{b};
      can = backend.can_access_peer(b.index(), a.index());
    }
    if (can) {
      {
        device_guard guard{a};
        backend.enable_peer_access(a.index(), b.index());
      }
      {
        device_guard guard{b};
        backend.enable_peer_access(b.index(), a.index());
      }
      usable = true;
    }
  } catch (const std::exception& ex) {
    if (!e.peer_warning_given) {
      e.peer_warning_given = true;
      detail::logger().warn(
          "peer access between {} and {} could not be enabled ({}); copies between them are "
          "staged through pinned host memory",
          to_string(a), to_string(b), ex.what());
    }
    usable = false;
  }
  e.peers.emplace(key, usable);
  return usable;
}

// ---- public ------------------------------------------------------------------------------

std::string to_string(copy_path path) {
  switch (path) {
    case copy_path::none:
      return "none";
    case copy_path::host_memcpy:
      return "host_memcpy";
    case copy_path::dma:
      return "dma";
    case copy_path::staged_to_device:
      return "staged_to_device";
    case copy_path::staged_to_host:
      return "staged_to_host";
    case copy_path::peer_dma:
      return "peer_dma";
    case copy_path::peer_staged:
      return "peer_staged";
    case copy_path::across_backends:
      return "across_backends";
    case copy_path::batch:
      return "batch";
    case copy_path::batch_loop:
      return "batch_loop";
    case copy_path::batch_kernel:
      return "batch_kernel";
  }
  return "unknown";
}

copy_options get_copy_options() {
  auto& e = the_engine();
  std::lock_guard lock{e.mutex};
  return e.options;
}

void set_copy_options(const copy_options& options) {
  check_options(options);
  auto& e = the_engine();
  std::lock_guard lock{e.mutex};
  e.options = options;
}

mr::caching_pinned_resource& staging_resource(device_kind backend) {
  if (device_count(backend) == 0) {
    SYNCMEM_UNSUPPORTED(
        fmt::format("staging_resource: no {} devices ({})", to_string(backend), why_no_devices(backend)));
  }
  auto& e = the_engine();
  // Never destroyed: transfers may still be freeing staging blocks after main().
  std::call_once(e.staging_once[backend], [&] {
    auto* r = new mr::caching_pinned_resource{backend};
    detail::release_at_exit([r] { r->trim(); });
    e.staging[backend] = r;
  });
  return *e.staging[backend];
}

transfer::transfer() noexcept = default;
transfer::~transfer() = default;
transfer::transfer(transfer&& other) noexcept
    : state_{std::move(other.state_)}, path_{std::exchange(other.path_, copy_path::none)} {}
transfer& transfer::operator=(transfer&& other) noexcept {
  if (this != &other) {
    state_ = std::move(other.state_);
    path_ = std::exchange(other.path_, copy_path::none);
  }
  return *this;
}

bool transfer::ready() const {
  const event* e = state_ ? state_->done_event() : nullptr;
  return e == nullptr || e->ready();
}

void transfer::wait() const {
  if (const event* e = state_ ? state_->done_event() : nullptr) e->synchronize();
}

transfer copy_async(void* dst, const void* src, std::size_t bytes, stream_view stream) {
  return copy_async(dst, src, bytes, stream, get_copy_options());
}

transfer copy_async(void* dst, const void* src, std::size_t bytes, stream_view stream, const copy_options& options) {
  return detail::copy_async_with(dst, src, bytes, stream, options, detail::staging_thresholds{});
}
transfer detail::copy_async_with(void* dst, const void* src, std::size_t bytes, stream_view stream,
                                 const copy_options& options, const staging_thresholds& thresholds) {
  if (bytes == 0) return {};
  check_options(options);
  SYNCMEM_EXPECTS(dst != nullptr, fmt::format("copy_async: the destination is null (copying {} bytes)", bytes));
  SYNCMEM_EXPECTS(src != nullptr, fmt::format("copy_async: the source is null (copying {} bytes)", bytes));
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  SYNCMEM_EXPECTS(d <= UINTPTR_MAX - bytes,
                  fmt::format("copy_async: the destination range [{}, +{}) wraps the address space", dst, bytes));
  SYNCMEM_EXPECTS(s <= UINTPTR_MAX - bytes,
                  fmt::format("copy_async: the source range [{}, +{}) wraps the address space", src, bytes));
  SYNCMEM_EXPECTS(
      d + bytes <= s || s + bytes <= d,
      fmt::format("copy_async: the destination [{}, +{}) and the source [{}, +{}) overlap", dst, bytes, src, bytes));
  // Current for the whole copy: the guards of the steps below then read and
  // switch nothing.
  const device_guard guard{stream.device()};
  const device_kind backend = stream.device().kind();
  copy_side to, from;
  {
    const detail::pointer_queries queries;  // one capture-mode exchange for both
    to = classify_pointer(dst, backend);
    from = classify_pointer(src, backend);
  }
  check_copy_extent(dst, bytes, to, "destination");
  check_copy_extent(src, bytes, from, "source");
  check_copy_stream(stream, to, from);

  return dispatch_copy(dst, to, src, from, bytes, stream, options, thresholds);
}

transfer detail::copy_async_known(void* dst, memory_kind dst_kind, const void* src, memory_kind src_kind,
                                  std::size_t bytes, stream_view stream) {
  if (bytes == 0) return {};
  const device_guard guard{stream.device()};  // current for the whole copy, as in copy_async_with
  const auto side_of = [&](memory_kind kind) {
    copy_side s;
    s.kind = kind;
    if (kind == memory_kind::device) s.device = stream.device();
    return s;
  };
  // A DMA between pinned and device memory of the stream's device reads no
  // option: it need not take the engine's lock (nor copy them) for them.
  if (is_direct_kind(dst_kind) && is_direct_kind(src_kind)) {
    static const copy_options unread{};
    return dispatch_copy(dst, side_of(dst_kind), src, side_of(src_kind), bytes, stream, unread, staging_thresholds{});
  }
  return dispatch_copy(dst, side_of(dst_kind), src, side_of(src_kind), bytes, stream, get_copy_options(),
                       staging_thresholds{});
}

void detail::copy_known_and_wait(void* dst, memory_kind dst_kind, const void* src, memory_kind src_kind,
                                 std::size_t bytes, stream_view stream) {
  if (bytes == 0) return;
  if (is_direct_kind(dst_kind) && is_direct_kind(src_kind) && !stream_capturing(stream)) {
    enqueue_copy(dst, src, bytes, stream);
    stream.synchronize();
    return;
  }
  copy_async_known(dst, dst_kind, src, src_kind, bytes, stream).wait();
}

void detail::finish_completed(transfer& t) noexcept { transfer_access::finish_completed(t); }

void detail::check_copy_options(const copy_options& options) { check_options(options); }
transfer detail::transfer_after(stream_view s, copy_path path) { return transfer_access::make(done_after(s), path); }
transfer detail::transfer_complete(copy_path path) { return transfer_access::make(nullptr, path); }
transfer detail::share_transfer(transfer& t) { return transfer_access::share(t); }

void copy(void* dst, const void* src, std::size_t bytes, stream_view stream) {
  copy_async(dst, src, bytes, stream).wait();
}

void copy(void* dst, const void* src, std::size_t bytes, stream_view stream, const copy_options& options) {
  copy_async(dst, src, bytes, stream, options).wait();
}

}  // namespace syncmem