#include "syncmem/synced_memory.hpp"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/deferred_release.hpp"
#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "mr/default_host_resource.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "transfer/copy_internal.hpp"

namespace syncmem {

std::string to_string(sync_state state) {
  switch (state) {
    case sync_state::uninitialized:
      return "uninitialized";
    case sync_state::at_host:
      return "at_host";
    case sync_state::at_device:
      return "at_device";
    case sync_state::synced:
      return "synced";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------
// construction
// ---------------------------------------------------------------------------

synced_memory::synced_memory() : synced_memory{0, current_device(), {}} {}

synced_memory::synced_memory(std::size_t bytes, synced_memory_options options)
    : synced_memory{bytes, current_device(), std::move(options)} {}

synced_memory::synced_memory(std::size_t bytes, device_id device, synced_memory_options options)
    : device_{device}, size_{bytes}, capacity_{bytes}, label_{std::move(options.label)}, options_{std::move(options)} {
  check_device(device);
  SYNCMEM_EXPECTS(bytes <= max_size(),
                  fmt::format("{}: size {} exceeds the maximum of {} bytes", describe(), bytes, max_size()));
  if (auto* r = options_.device_resource) {
    SYNCMEM_EXPECTS(
        r->kind() == memory_kind::device && r->device() == device,
        fmt::format("{}: device_resource {} is not a device resource of {}", describe(), r->name(), to_string(device)));
  }
  if (auto* r = options_.host_resource) {
    SYNCMEM_EXPECTS(r->kind() == memory_kind::pinned_host || r->kind() == memory_kind::pageable_host,
                    fmt::format("{}: host_resource {} does not hand out host memory", describe(), r->name()));
    host_.kind = r->kind();
  } else {
    host_.kind = options_.host_kind == host_memory_kind::pinned ? memory_kind::pinned_host : memory_kind::pageable_host;
  }
  device_side_.kind = memory_kind::device;
}

synced_memory::~synced_memory() { reset(); }

synced_memory::synced_memory(synced_memory&& other) noexcept : device_{other.device_} { steal(other); }

synced_memory& synced_memory::operator=(synced_memory&& other) noexcept {
  if (this != &other) {
    reset();
    steal(other);
  }
  return *this;
}

void synced_memory::steal(synced_memory& other) noexcept {
  state_ = std::exchange(other.state_, sync_state::uninitialized);
  in_flight_ = std::exchange(other.in_flight_, in_flight::none);
  last_stream_ = std::exchange(other.last_stream_, {});
  moved_from_ = std::exchange(other.moved_from_, true);
  host_ = std::exchange(other.host_, {});
  device_side_ = std::exchange(other.device_side_, {});
  device_ = other.device_;
  size_ = std::exchange(other.size_, 0);
  capacity_ = std::exchange(other.capacity_, 0);
  label_ = other.label_;  // the source keeps its label for the error it gives when used
  options_ = other.options_;
  state_before_copy_ = other.state_before_copy_;
  prefetch_in_flight_ = other.prefetch_in_flight_;
  copy_ = std::move(other.copy_);
  order_event_ = std::move(other.order_event_);
  other.order_event_.reset();
  counters_ = other.counters_;
  reallocations_ = other.reallocations_;
}

synced_memory synced_memory::clone() const {
  check_usable();
  auto& self = const_cast<synced_memory&>(*this);  // waiting and ordering change no contents
  synced_memory copy{size_, device_, options_};
  copy.label_ = label_;
  if (size_ == 0) return copy;
  self.wait_for_copy();
  const sync_state state = state_;
  if (state == sync_state::at_host || state == sync_state::synced) {
    copy.host_ = copy.allocate_host(copy.capacity_);
    std::memcpy(copy.host_.ptr, host_.ptr, size_);
  }
  if (state == sync_state::at_device || state == sync_state::synced) {
    device_guard guard{device_};
    const stream_view s = self.last_or_default_stream();
    self.order_on(s);
    copy.device_side_ = copy.allocate_device(copy.capacity_, s);
    copy.order_on(s);
    transfer t = detail::copy_async_known(copy.device_side_.ptr, memory_kind::device, device_side_.ptr,
                                          memory_kind::device, size_, s);  // stream-ordered; no wait
    ++copy.counters_.device_copies;
    copy.counters_.device_bytes += size_;
  }
  copy.state_ = state;
  return copy;
}

// ---------------------------------------------------------------------------
// access
// ---------------------------------------------------------------------------

const void* synced_memory::host_data() {
  if (state_ == sync_state::synced && in_flight_ == in_flight::none) [[likely]]
    return host_.ptr;
  if (state_ == sync_state::at_host && in_flight_ == in_flight::none) return host_.ptr;
  to_host(false);
  return size_ == 0 ? nullptr : host_.ptr;
}

void* synced_memory::mutable_host_data() {
  if (state_ == sync_state::at_host && in_flight_ == in_flight::none) [[likely]]
    return host_.ptr;
  to_host(true);
  return size_ == 0 ? nullptr : host_.ptr;
}

const void* synced_memory::device_data() { return device_data(default_device_stream()); }

const void* synced_memory::device_data(stream_view s) {
  if ((state_ == sync_state::synced || state_ == sync_state::at_device) && !prefetch_in_flight_ && last_stream_.is(s))
      [[likely]] {
    return device_side_.ptr;
  }
  to_device(s, false);
  return size_ == 0 ? nullptr : device_side_.ptr;
}

void* synced_memory::mutable_device_data() { return mutable_device_data(default_device_stream()); }

void* synced_memory::mutable_device_data(stream_view s) {
  if ((state_ == sync_state::synced || state_ == sync_state::at_device) && !prefetch_in_flight_ && last_stream_.is(s))
      [[likely]] {
    state_ = sync_state::at_device;
    return device_side_.ptr;
  }
  to_device(s, false);
  if (state_ != sync_state::uninitialized) state_ = sync_state::at_device;  // an empty buffer stays so
  return size_ == 0 ? nullptr : device_side_.ptr;
}

void synced_memory::prefetch_to_device(stream_view s) { to_device(s, true); }
void synced_memory::prefetch_to_device() { to_device(default_device_stream(), true); }

void synced_memory::prefetch_to_host(stream_view s) {
  check_usable();
  check_stream(s);
  if (state_ != sync_state::at_device || size_ == 0) return;  // nothing to copy
  device_guard guard{device_};
  order_on(s);
  if (host_.ptr == nullptr) host_ = allocate_host(capacity_);
  start_copy(s, in_flight::to_host, true);
}

void synced_memory::prefetch_to_host() { prefetch_to_host(last_or_default_stream()); }

bool synced_memory::ready() const { return !copy_running(); }

void synced_memory::synchronize() {
  check_usable();
  wait_for_copy();
  if (last_stream_.usable()) last_stream_.view().synchronize();
}

// A query that writes nothing, so that concurrent calls do not race.
sync_state synced_memory::state() const {
  // While a prefetch is in flight the buffer is not yet synced: report the side
  // that was newest before it. A later access made the state its own regardless.
  if (prefetch_in_flight_ && state_ == sync_state::synced && copy_running()) return state_before_copy_;
  return state_;
}

bool synced_memory::copy_running() const { return in_flight_ != in_flight::none && !copy_.ready(); }

// ---------------------------------------------------------------------------
// the slow paths
// ---------------------------------------------------------------------------

void synced_memory::to_host(bool for_write) {
  check_usable();
  // A download below ends any copy in flight (it waits for the stream that
  // copy is on): no query for it then.
  if (state_ != sync_state::at_device) finish_copy_if_done();
  // A download in flight writes the host side: wait before any host access. An
  // upload in flight reads it: wait before a host write. A download started
  // below needs no wait: it is ordered after any copy in flight on the device.
  if (in_flight_ == in_flight::to_host || (for_write && in_flight_ != in_flight::none)) wait_for_copy();
  switch (state_) {
    case sync_state::uninitialized:
      if (size_ == 0) break;
      if (host_.ptr == nullptr) host_ = allocate_host(capacity_);
      if (options_.zero_fill) std::memset(host_.ptr, 0, size_);
      state_ = sync_state::at_host;
      break;
    case sync_state::at_device: {
      if (size_ == 0) break;
      device_guard guard{device_};
      if (host_.ptr == nullptr) host_ = allocate_host(capacity_);
      // In order after the last device-side write (and after any copy in
      // flight on that stream), waited for at once: no event to record.
      detail::copy_known_and_wait(host_.ptr, host_.kind, device_side_.ptr, memory_kind::device, size_,
                                  last_or_default_stream());
      detail::finish_completed(copy_);  // any copy in flight ran before it
      in_flight_ = in_flight::none;
      ++counters_.to_host_copies;
      counters_.to_host_bytes += size_;
      state_ = sync_state::synced;
      break;
    }
    case sync_state::at_host:
    case sync_state::synced:
      break;
  }
  if (for_write && state_ != sync_state::uninitialized) state_ = sync_state::at_host;
  prefetch_in_flight_ = false;  // an access makes the state its own (see device_data)
}

void synced_memory::to_device(stream_view s, bool prefetch) {
  check_usable();
  check_stream(s);
  device_guard guard{device_};
  order_on(s);
  finish_copy_if_done();
  switch (state_) {
    case sync_state::uninitialized:
      if (size_ == 0) break;
      if (device_side_.ptr == nullptr) device_side_ = allocate_device(capacity_, s);
      if (options_.zero_fill) zero_device(0, size_, s);
      state_ = sync_state::at_device;
      break;
    case sync_state::at_host:
      if (size_ == 0) break;
      if (device_side_.ptr == nullptr) device_side_ = allocate_device(capacity_, s);
      // A small upload that a device access starts reads the host side before
      // it returns: a host write next need not wait for it. A prefetch keeps
      // its event, which ready() and state() ask.
      if (!prefetch && (host_.kind == memory_kind::pinned_host || host_.kind == memory_kind::pageable_host) &&
          detail::upload_read_at_return(device_side_.ptr, host_.ptr, size_, s)) {
        copy_started(transfer{}, in_flight::to_device, false);
        in_flight_ = in_flight::none;
        break;
      }
      start_copy(s, in_flight::to_device, prefetch);
      break;
    case sync_state::at_device:
    case sync_state::synced:
      break;
  }
  // A device access makes the buffer synced at once (the pointer is up to date
  // in order on `s`), even behind an earlier prefetch's copy still queued.
  if (!prefetch) prefetch_in_flight_ = false;
}

// Every copy is enqueued on the stream of the last device-side use (or one
// ordered after it), so it runs after any copy still in flight, which it
// replaces as the one to wait for.
void synced_memory::start_copy(stream_view s, in_flight direction, bool prefetch) {
  // The buffer knows both kinds: the engine need not ask the driver about the pointers.
  transfer t = direction == in_flight::to_host
                   ? detail::copy_async_known(host_.ptr, host_.kind, device_side_.ptr, memory_kind::device, size_, s)
                   : detail::copy_async_known(device_side_.ptr, memory_kind::device, host_.ptr, host_.kind, size_, s);
  copy_started(std::move(t), direction, prefetch);
}

void synced_memory::copy_started(transfer t, in_flight direction, bool prefetch) {
  copy_ = std::move(t);
  in_flight_ = direction;
  if (direction == in_flight::to_host) {
    ++counters_.to_host_copies;
    counters_.to_host_bytes += size_;
    state_before_copy_ = sync_state::at_device;
  } else {
    ++counters_.to_device_copies;
    counters_.to_device_bytes += size_;
    state_before_copy_ = sync_state::at_host;
  }
  prefetch_in_flight_ = prefetch;
  state_ = sync_state::synced;
}

void synced_memory::wait_for_copy() const {
  if (in_flight_ == in_flight::none) return;
  copy_.wait();
  in_flight_ = in_flight::none;
}

void synced_memory::finish_copy_if_done() const {
  if (in_flight_ != in_flight::none && copy_.ready()) in_flight_ = in_flight::none;
}

void synced_memory::order_on(stream_view s) {
  if (last_stream_.is(s)) return;
  // A destroyed syncmem::stream finished its work before it went: nothing to
  // wait for, even when `s` got its handle.
  if (last_stream_.usable()) {
    if (!order_event_) order_event_.emplace(device_);
    order_event_->record(last_stream_.view());
    s.wait(*order_event_);
  }
  last_stream_.remember(s);
}

stream_view synced_memory::last_or_default_stream() const {
  return last_stream_.usable() ? last_stream_.view() : default_device_stream();
}

stream_view synced_memory::default_device_stream() const { return default_stream(device_); }

// ---------------------------------------------------------------------------
// many buffers at once
// ---------------------------------------------------------------------------

namespace {
// The buffers, each once, checked before anything changes.
std::vector<synced_memory*> distinct_buffers(std::span<synced_memory* const> buffers, const char* what) {
  std::vector<synced_memory*> out(buffers.begin(), buffers.end());
  for (std::size_t i = 0; i < out.size(); ++i) {
    SYNCMEM_EXPECTS(out[i] != nullptr, fmt::format("{}: buffer {} of {} is null", what, i, out.size()));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}
}  // namespace

void prefetch_to_device(std::span<synced_memory* const> buffers, stream_view s) {
  const auto list = distinct_buffers(buffers, "prefetch_to_device");
  for (synced_memory* b : list) b->check_stream(s);
  if (list.empty()) return;
  device_guard guard{s.device()};
  // Device memory first, for every buffer that needs some: a failure leaves
  // every state as it was.
  for (synced_memory* b : list) {
    b->order_on(s);
    b->finish_copy_if_done();
    const bool needs_memory = b->size_ > 0 && b->device_side_.ptr == nullptr &&
                              (b->state_ == sync_state::uninitialized || b->state_ == sync_state::at_host);
    if (needs_memory) b->device_side_ = b->allocate_device(b->capacity_, s);
  }
  std::vector<detail::known_copy> copies;
  std::vector<synced_memory*> moving;
  for (synced_memory* b : list) {
    if (b->size_ > 0 && b->state_ == sync_state::at_host) {
      copies.push_back({b->device_side_.ptr, memory_kind::device, b->host_.ptr, b->host_.kind, b->size_});
      moving.push_back(b);
    }
  }
  transfer batch = detail::copy_batch_known(copies, s);
  for (synced_memory* b : moving)
    b->copy_started(detail::share_transfer(batch), synced_memory::in_flight::to_device, true);
  for (synced_memory* b : list) {
    if (b->size_ > 0 && b->state_ == sync_state::uninitialized) {
      if (b->options_.zero_fill) b->zero_device(0, b->size_, s);
      b->state_ = sync_state::at_device;
    }
  }
}

void prefetch_to_host(std::span<synced_memory* const> buffers, stream_view s) {
  const auto list = distinct_buffers(buffers, "prefetch_to_host");
  for (synced_memory* b : list) b->check_stream(s);
  std::vector<synced_memory*> moving;
  for (synced_memory* b : list) {
    if (b->state_ == sync_state::at_device && b->size_ > 0) moving.push_back(b);
  }
  if (moving.empty()) return;
  device_guard guard{s.device()};
  for (synced_memory* b : moving) {
    b->order_on(s);
    if (b->host_.ptr == nullptr) b->host_ = b->allocate_host(b->capacity_);
  }
  std::vector<detail::known_copy> copies;
  copies.reserve(moving.size());
  for (synced_memory* b : moving) {
    copies.push_back({b->host_.ptr, b->host_.kind, b->device_side_.ptr, memory_kind::device, b->size_});
  }
  transfer batch = detail::copy_batch_known(copies, s);
  for (synced_memory* b : moving)
    b->copy_started(detail::share_transfer(batch), synced_memory::in_flight::to_host, true);
}

void synchronize(std::span<synced_memory* const> buffers) {
  const auto list = distinct_buffers(buffers, "synchronize");
  for (synced_memory* b : list) b->check_usable();
  std::vector<stream_view> streams;
  for (synced_memory* b : list) {
    b->wait_for_copy();
    if (!b->last_stream_.usable()) continue;
    const stream_view v = b->last_stream_.view();
    const bool seen = std::any_of(streams.begin(), streams.end(), [&](const stream_view& w) {
      return w.device() == v.device() && w.handle() == v.handle();
    });
    if (!seen) streams.push_back(v);
  }
  for (const stream_view& v : streams) v.synchronize();
}

// ---------------------------------------------------------------------------
// checks and descriptions
// ---------------------------------------------------------------------------

std::string synced_memory::describe() const {
  return fmt::format("synced_memory '{}' ({})", label_.empty() ? std::string{"unlabelled"} : label_,
                     to_string(device_));
}

void synced_memory::throw_not_whole_elements(const char* accessor, std::size_t element_size) const {
  SYNCMEM_FAIL(fmt::format("{}: {}<T>: its size of {} bytes is not a multiple of sizeof(T) = {}", describe(), accessor,
                           size_, element_size));
}

void synced_memory::check_usable() const {
  SYNCMEM_EXPECTS(!moved_from_, fmt::format("use of a moved-from synced_memory '{}'", label_));
}

void synced_memory::check_stream(stream_view s) const {
  check_usable();
  SYNCMEM_EXPECTS(s.device() == device_, fmt::format("{}: a stream of {} was given; streams must belong to {}",
                                                     describe(), to_string(s.device()), to_string(device_)));
}

}  // namespace syncmem
