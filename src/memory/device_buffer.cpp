#include "syncmem/device_buffer.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "syncmem/copy.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"

namespace syncmem {

namespace {

bool same_stream(stream_view a, stream_view b) noexcept { return a.device() == b.device() && a.handle() == b.handle(); }

// Makes work enqueued later on `next` wait for the work so far on `last`, without blocking the host.
void order_after(const std::optional<stream_view>& last, stream_view next) {
  if (!last || same_stream(*last, next)) return;
  event e{last->device()};
  e.record(*last);
  next.wait(e);
}

}  // namespace

device_buffer::device_buffer(std::size_t bytes, stream_view s, mr::memory_resource* resource)
    : stream_{s}, resource_{resource != nullptr ? resource : &mr::get_per_device_resource(s.device())} {
  data_ = resource_->allocate(bytes, s);
  size_ = bytes;
  capacity_ = bytes;
}

device_buffer::device_buffer(const void* source, std::size_t bytes, stream_view s, mr::memory_resource* resource)
    : stream_{s}, resource_{resource != nullptr ? resource : &mr::get_per_device_resource(s.device())} {
  SYNCMEM_EXPECTS(source != nullptr || bytes == 0, fmt::format("device_buffer: the source of {} bytes is null", bytes));
  data_ = resource_->allocate(bytes, s);
  size_ = bytes;
  capacity_ = bytes;
  try {
    if (bytes > 0) copy(data_, source, bytes, s);
  } catch (...) {
    release();
    throw;
  }
}

device_buffer::~device_buffer() { release(); }

device_buffer::device_buffer(device_buffer&& other) noexcept
    : data_{std::exchange(other.data_, nullptr)},
      size_{std::exchange(other.size_, 0)},
      capacity_{std::exchange(other.capacity_, 0)},
      stream_{std::exchange(other.stream_, std::nullopt)},
      resource_{std::exchange(other.resource_, nullptr)} {}

device_buffer& device_buffer::operator=(device_buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    stream_ = std::exchange(other.stream_, std::nullopt);
    resource_ = std::exchange(other.resource_, nullptr);
  }
  return *this;
}

void device_buffer::release() noexcept {
  if (resource_ != nullptr && data_ != nullptr) resource_->deallocate(data_, capacity_, *stream_);
  data_ = nullptr;
  size_ = 0;
  capacity_ = 0;
}

device_buffer device_buffer::clone(stream_view s, mr::memory_resource* resource) const {
  check_stream("clone", s);
  mr::memory_resource* r = resource != nullptr ? resource : resource_;
  if (r == nullptr) return device_buffer{0, s};
  order_after(stream_, s);  // the contents are final in order on stream_
  return device_buffer{data_, size_, s, r};
}

mr::memory_resource& device_buffer::resource_for(stream_view s) const {
  return resource_ != nullptr ? *resource_ : mr::get_per_device_resource(s.device());
}

std::string device_buffer::describe() const {
  if (resource_ == nullptr) return "device_buffer (empty, no resource)";
  return fmt::format("device_buffer of {} from {}", detail::format_bytes(size_), resource_->name());
}

std::string device_buffer::to_string() const {
  std::string text = describe();
  if (capacity_ > size_) text += fmt::format(", capacity {}", detail::format_bytes(capacity_));
  return text;
}

void device_buffer::reallocate(std::size_t bytes, stream_view s) {
  auto& r = resource_for(s);
  void* fresh = r.allocate(bytes, s);  // throws with nothing changed
  if (size_ > 0) {
    try {
      order_after(stream_, s);  // the old contents are final in order on stream_
      copy(fresh, data_, size_, s);
    } catch (...) {
      r.deallocate(fresh, bytes, s);
      throw;
    }
  }
  if (data_ != nullptr) resource_->deallocate(data_, capacity_, s);
  data_ = fresh;
  capacity_ = bytes;
  resource_ = &r;
  stream_ = s;
}

void device_buffer::resize(std::size_t bytes, stream_view s) {
  check_stream("resize", s);
  if (bytes > capacity_) {
    reallocate(bytes, s);
  } else {
    order_after(stream_, s);
  }
  if (resource_ == nullptr) resource_ = &resource_for(s);
  size_ = bytes;
  stream_ = s;
}

void device_buffer::reserve(std::size_t bytes, stream_view s) {
  check_stream("reserve", s);
  if (bytes > capacity_) reallocate(bytes, s);
}

void device_buffer::shrink_to_fit(stream_view s) {
  check_stream("shrink_to_fit", s);
  if (capacity_ == size_) return;
  if (size_ == 0) {
    const stream_view last = stream_.value_or(s);
    if (data_ != nullptr) resource_->deallocate(data_, capacity_, last);
    data_ = nullptr;
    capacity_ = 0;
    stream_ = s;
    return;
  }
  reallocate(size_, s);
}

void device_buffer::check_range(const char* function, std::size_t offset, std::size_t bytes) const {
  SYNCMEM_EXPECTS(offset <= size_ && bytes <= size_ - offset,
                  fmt::format("{}: {} of {} bytes at offset {} is out of range: it needs offset + bytes <= {}",
                              describe(), function, bytes, offset, size_));
}

void device_buffer::check_stream(const char* function, stream_view s) const {
  if (!stream_) return;  // an empty buffer is bound to no device yet
  SYNCMEM_EXPECTS(
      s.device() == stream_->device(),
      fmt::format("{}: {} was given a stream of {}; the buffer's memory is in order on a stream of {}, and "
                  "streams must belong to that device",
                  describe(), function, syncmem::to_string(s.device()), syncmem::to_string(stream_->device())));
}

void device_buffer::copy_from_host(const void* source, std::size_t bytes, stream_view s, std::size_t offset) {
  check_stream("copy_from_host", s);
  check_range("copy_from_host", offset, bytes);
  if (bytes == 0) return;
  SYNCMEM_EXPECTS(source != nullptr, fmt::format("{}: copy_from_host of {} bytes from null", describe(), bytes));
  order_after(stream_, s);
  copy(static_cast<char*>(data_) + offset, source, bytes, s);
  stream_ = s;
}

void device_buffer::copy_to_host(void* destination, std::size_t bytes, stream_view s, std::size_t offset) const {
  check_stream("copy_to_host", s);
  check_range("copy_to_host", offset, bytes);
  if (bytes == 0) return;
  SYNCMEM_EXPECTS(destination != nullptr, fmt::format("{}: copy_to_host of {} bytes to null", describe(), bytes));
  order_after(stream_, s);
  copy(destination, static_cast<const char*>(data_) + offset, bytes, s);
}

}  // namespace syncmem
