// Interim copy: one backend memcpy per call, tracked by an event.

#include "syncmem/copy.hpp"

#include <fmt/format.h>

#include "backend.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"

namespace syncmem {

struct transfer::state {
  event done;
};

transfer::transfer() noexcept = default;
transfer::~transfer() {
  try {
    wait();
  } catch (...) {  // NOLINT(bugprone-empty-catch)
  }
}
transfer::transfer(transfer&&) noexcept = default;
transfer& transfer::operator=(transfer&& other) noexcept {
  if (this != &other) {
    try {
      wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch)
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

bool transfer::ready() const { return !state_ || state_->done.ready(); }
void transfer::wait() const {
  if (state_) state_->done.synchronize();
}

transfer copy_async(void* dst, const void* src, std::size_t bytes, stream_view stream) {
  transfer t;
  if (bytes == 0) return t;
  SYNCMEM_EXPECTS(dst != nullptr && src != nullptr, fmt::format("copy of {} bytes with a null pointer", bytes));
  device_guard guard{stream.device()};
  detail::backend_for(stream.device()).memcpy_async(dst, src, bytes, stream.device().index(), stream.native_handle());
  t.state_ = std::make_unique<transfer::state>(transfer::state{event{stream.device()}});
  t.state_->done.record(stream);
  return t;
}

void copy(void* dst, const void* src, std::size_t bytes, stream_view stream) {
  copy_async(dst, src, bytes, stream).wait();
}

}  // namespace syncmem
