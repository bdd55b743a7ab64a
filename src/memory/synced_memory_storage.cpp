// synced_memory's storage: allocating, releasing and zeroing each side, resizing,
// and borrowing memory the buffer does not own.

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

// ---------------------------------------------------------------------------
// memory
// ---------------------------------------------------------------------------

synced_memory::side synced_memory::allocate_host(std::size_t bytes) const {
  mr::memory_resource& r = options_.host_resource != nullptr
                               ? *options_.host_resource
                               : mr::detail::default_host_resource(options_.host_kind == host_memory_kind::pageable
                                                                       ? memory_kind::pageable_host
                                                                       : memory_kind::pinned_host,
                                                                   device_.kind());
  mr::scoped_allocation_label label{label_};
  side s;
  s.ptr = r.allocate(bytes, last_or_default_stream());
  s.bytes = bytes;
  // Pinned resources may fall back to pageable memory when pinning fails: ask
  // once per allocation, so that every copy takes the right path.
  s.kind = r.kind() == memory_kind::pinned_host ? detail::host_memory_kind_for(s.ptr, device_.kind()) : r.kind();
  s.resource = &r;
  return s;
}

synced_memory::side synced_memory::allocate_device(std::size_t bytes, stream_view s) const {
  mr::memory_resource& r =
      options_.device_resource != nullptr ? *options_.device_resource : mr::get_per_device_resource(device_);
  mr::scoped_allocation_label label{label_};
  side d;
  d.ptr = r.allocate(bytes, s);
  d.bytes = bytes;
  d.kind = memory_kind::device;
  d.resource = &r;
  return d;
}

void synced_memory::release_host() noexcept {
  try {
    if (host_.ptr != nullptr && !host_.borrowed && host_.resource != nullptr) {
      host_.resource->deallocate(host_.ptr, host_.bytes, last_or_default_stream());
    }
    // After the work enqueued on the memory (in order on the last stream) has completed.
    detail::release_after(last_or_default_stream(), std::move(host_.keep_alive));
  } catch (...) {  // default_stream only throws for a device that is gone
    detail::log_ignored("releasing a synced_memory's host buffer");
  }
  const auto kind = options_.host_resource != nullptr                ? options_.host_resource->kind()
                    : options_.host_kind == host_memory_kind::pinned ? memory_kind::pinned_host
                                                                     : memory_kind::pageable_host;
  host_ = {};
  host_.kind = kind;
}

void synced_memory::release_device() noexcept {
  detail::ignore_failure("releasing a synced_memory's device buffer", [&] {  // fails: the device is gone
    device_guard guard{device_};
    if (device_side_.ptr != nullptr && !device_side_.borrowed && device_side_.resource != nullptr) {
      device_side_.resource->deallocate(device_side_.ptr, device_side_.bytes, last_or_default_stream());
    }
    // Copies, fills and the caller's own work on borrowed memory are all ordered on the last stream.
    detail::release_after(last_or_default_stream(), std::move(device_side_.keep_alive));
  });
  device_side_ = {};
  device_side_.kind = memory_kind::device;
}

void synced_memory::zero_host(std::size_t from, std::size_t to) const {
  if (to > from) std::memset(static_cast<char*>(host_.ptr) + from, 0, to - from);
}

void synced_memory::zero_device(std::size_t from, std::size_t to, stream_view s) {
  if (to <= from) return;
  device_guard guard{device_};
  detail::backend_for(device_).memset_async(static_cast<char*>(device_side_.ptr) + from, 0, to - from, device_.index(),
                                            s.handle());
}

void synced_memory::reset() noexcept {
  if (moved_from_) return;
  // A copy that failed writes nothing more.
  detail::ignore_failure("waiting for a copy before a reset", [&] { wait_for_copy(); });
  release_device();
  release_host();
  order_event_.reset();
  last_stream_.forget();
  state_ = sync_state::uninitialized;
  size_ = 0;
  capacity_ = 0;
}

// ---------------------------------------------------------------------------
// capacity
// ---------------------------------------------------------------------------

void synced_memory::resize(std::size_t bytes, resize_mode mode) {
  check_usable();
  SYNCMEM_EXPECTS(bytes <= max_size(),
                  fmt::format("{}: size {} exceeds the maximum of {} bytes", describe(), bytes, max_size()));
  if (bytes > capacity()) {
    grow(bytes, mode);
    return;
  }
  if (mode == resize_mode::discard) {
    wait_for_copy();
    size_ = bytes;
    state_ = sync_state::uninitialized;
    return;
  }
  const std::size_t old = size_;
  if (bytes <= old) {
    size_ = bytes;
    if (bytes == 0) state_ = sync_state::uninitialized;  // an empty buffer holds no contents
    return;
  }
  // Growing. The valid sides of an empty buffer may have no memory yet: give
  // them some first (nothing has changed if that throws). Then the new tail
  // reads as zeros on every valid side.
  wait_for_copy();
  const bool host_valid = state_ == sync_state::at_host || state_ == sync_state::synced;
  const bool device_valid = state_ == sync_state::at_device || state_ == sync_state::synced;
  if (host_valid && host_.ptr == nullptr) host_ = allocate_host(capacity_);
  if (device_valid) {
    device_guard guard{device_};
    const auto s = last_or_default_stream();
    order_on(s);
    if (device_side_.ptr == nullptr) device_side_ = allocate_device(capacity_, s);
    if (options_.zero_fill) zero_device(old, bytes, s);
  }
  if (host_valid && options_.zero_fill) zero_host(old, bytes);
  size_ = bytes;
}

std::size_t synced_memory::capacity() const noexcept {
  std::size_t c = capacity_;
  if (host_.ptr != nullptr) c = std::min(c, host_.bytes);
  if (device_side_.ptr != nullptr) c = std::min(c, device_side_.bytes);
  return c;
}

void synced_memory::grow(std::size_t bytes, resize_mode mode) {
  // Borrowed memory that is too small follows the policy; decide before changing anything.
  const bool host_too_small = host_.ptr != nullptr && host_.bytes < bytes;
  const bool device_too_small = device_side_.ptr != nullptr && device_side_.bytes < bytes;
  if ((host_too_small && host_.borrowed) || (device_too_small && device_side_.borrowed)) {
    SYNCMEM_EXPECTS(options_.on_borrowed_growth == borrow_policy::move_to_owned,
                    fmt::format("{}: cannot grow borrowed {} memory of {} bytes to {} bytes "
                                "(borrow_policy::throw_on_growth); nothing was changed",
                                describe(), host_too_small && host_.borrowed ? "host" : "device",
                                host_too_small && host_.borrowed ? host_.bytes : device_side_.bytes, bytes));
  }
  wait_for_copy();
  const std::size_t old = size_;
  const sync_state state = state_;
  // Sides that are large enough stay (a stale one is refreshed when next used);
  // only those too small are replaced or released.
  auto release_if_too_small = [&] {
    if (host_too_small) release_host();
    if (device_too_small) release_device();
  };
  if (mode == resize_mode::discard || state == sync_state::uninitialized) {
    release_if_too_small();
    capacity_ = bytes;
    size_ = bytes;
    state_ = sync_state::uninitialized;
    ++reallocations_;
    return;
  }
  // Keep the contents: move only the newest side into new memory. Of a synced
  // buffer, keep a side that is large enough as it is, else move the device side.
  bool use_host = state == sync_state::at_host;
  if (state == sync_state::synced) use_host = !host_too_small && device_too_small;
  if (use_host) {
    if (host_too_small || host_.ptr == nullptr) {  // absent only when the buffer was empty
      side fresh = allocate_host(bytes);
      if (old > 0) std::memcpy(fresh.ptr, host_.ptr, old);
      release_host();
      host_ = std::move(fresh);
    }
    if (device_too_small) release_device();
    capacity_ = bytes;
    size_ = bytes;
    if (options_.zero_fill) zero_host(old, bytes);
    state_ = sync_state::at_host;
  } else {
    device_guard guard{device_};
    const auto s = last_or_default_stream();
    order_on(s);
    if (device_too_small || device_side_.ptr == nullptr) {  // absent only when the buffer was empty
      side fresh = allocate_device(bytes, s);
      if (old > 0) {
        try {
          transfer t = detail::copy_async_known(fresh.ptr, memory_kind::device, device_side_.ptr, memory_kind::device,
                                                old, s);  // stream-ordered before the free below
        } catch (...) {
          fresh.resource->deallocate(fresh.ptr, fresh.bytes, s);
          throw;
        }
        ++counters_.device_copies;
        counters_.device_bytes += old;
      }
      release_device();
      device_side_ = std::move(fresh);
    }
    if (host_too_small) release_host();
    capacity_ = bytes;
    size_ = bytes;
    if (options_.zero_fill) zero_device(old, bytes, s);
    state_ = sync_state::at_device;
  }
  ++reallocations_;
}

// ---------------------------------------------------------------------------
// borrowing
// ---------------------------------------------------------------------------

void synced_memory::borrow_host(void* p, std::size_t bytes, std::shared_ptr<void> keep_alive) {
  check_usable();
  SYNCMEM_EXPECTS(p != nullptr || bytes == 0,
                  fmt::format("{}: borrow_host of {} bytes at a null pointer", describe(), bytes));
  SYNCMEM_EXPECTS(bytes <= max_size(),
                  fmt::format("{}: size {} exceeds the maximum of {} bytes", describe(), bytes, max_size()));
  const auto attributes = get_pointer_attributes(p);
  SYNCMEM_EXPECTS(attributes.kind == memory_kind::pageable_host || attributes.kind == memory_kind::pinned_host ||
                      attributes.kind == memory_kind::managed,
                  fmt::format("{}: borrow_host was given {} memory", describe(), to_string(attributes.kind)));
  wait_for_copy();
  release_host();
  if (bytes > 0) {  // borrowing nothing leaves the side empty
    host_.ptr = p;
    host_.bytes = bytes;
    host_.borrowed = true;
    host_.kind = attributes.kind == memory_kind::managed ? memory_kind::pinned_host
                                                         : detail::host_memory_kind_for(p, device_.kind());
    host_.keep_alive = std::move(keep_alive);
  }
  if (device_side_.ptr != nullptr && device_side_.bytes < bytes) release_device();
  size_ = bytes;
  capacity_ = std::max(capacity_, bytes);
  state_ = bytes == 0 ? sync_state::uninitialized : sync_state::at_host;
}

void synced_memory::borrow_device(void* p, std::size_t bytes, std::shared_ptr<void> keep_alive) {
  check_usable();
  SYNCMEM_EXPECTS(p != nullptr || bytes == 0,
                  fmt::format("{}: borrow_device of {} bytes at a null pointer", describe(), bytes));
  SYNCMEM_EXPECTS(bytes <= max_size(),
                  fmt::format("{}: size {} exceeds the maximum of {} bytes", describe(), bytes, max_size()));
  if (p != nullptr) {
    const auto attributes = get_pointer_attributes(p);
    SYNCMEM_EXPECTS(attributes.kind == memory_kind::device || attributes.kind == memory_kind::managed,
                    fmt::format("{}: borrow_device was given {} memory, not device memory", describe(),
                                to_string(attributes.kind)));
    SYNCMEM_EXPECTS(!attributes.device || *attributes.device == device_,
                    fmt::format("{}: borrow_device was given memory of {}, but the buffer belongs to {}", describe(),
                                to_string(*attributes.device), to_string(device_)));
    SYNCMEM_EXPECTS(attributes.size == 0 || static_cast<const char*>(p) + bytes <=
                                                static_cast<const char*>(attributes.base) + attributes.size,
                    fmt::format("{}: borrow_device of {} bytes runs past the end of its allocation of {} bytes",
                                describe(), bytes, attributes.size));
  }
  wait_for_copy();
  release_device();
  if (bytes > 0) {  // borrowing nothing leaves the side empty
    device_side_.ptr = p;
    device_side_.bytes = bytes;
    device_side_.borrowed = true;
    device_side_.keep_alive = std::move(keep_alive);
  }
  if (host_.ptr != nullptr && host_.bytes < bytes) release_host();
  size_ = bytes;
  capacity_ = std::max(capacity_, bytes);
  state_ = bytes == 0 ? sync_state::uninitialized : sync_state::at_device;
}

}  // namespace syncmem
