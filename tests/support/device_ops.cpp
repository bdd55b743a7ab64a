#include "device_ops.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "backend/backend.hpp"
#include "pattern.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/device_id.hpp"

namespace syncmem::test {

void device_fill_pattern(stream_view s, void* p, std::size_t bytes, std::uint64_t seed) {
  if (s.device().kind() == device_kind::cuda) return cuda_ops::fill_pattern(s, p, bytes, seed);
  s.launch_host_func([p, bytes, seed] { write_pattern(static_cast<std::uint8_t*>(p), bytes, seed); });
}

std::vector<std::uint8_t> read_device(stream_view s, const void* p, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  if (n == 0) return out;
  device_guard guard{s.device()};
  detail::backend_for(s.device()).memcpy_async(out.data(), p, n, s.device().index(), s.handle());
  s.synchronize();
  return out;
}

void device_add_bytes(stream_view s, void* p, std::size_t bytes, std::uint8_t delta) {
  if (s.device().kind() == device_kind::cuda) return cuda_ops::add_bytes(s, p, bytes, delta);
  s.launch_host_func([p, bytes, delta] {
    auto* b = static_cast<std::uint8_t*>(p);
    for (std::size_t i = 0; i < bytes; ++i) b[i] = static_cast<std::uint8_t>(b[i] + delta);
  });
}

void device_sleep(stream_view s, std::chrono::microseconds duration) {
  if (s.device().kind() == device_kind::cuda) return cuda_ops::sleep(s, duration);
  s.launch_host_func([duration] { std::this_thread::sleep_for(duration); });
}

bool stream_holds_allowed() { return std::getenv("SYNCMEM_NO_STREAM_HOLDS") == nullptr; }

struct stream_latch::state {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false;
  bool reached = false;
  bool timed_out = false;
};

stream_latch::stream_latch(stream_view s, std::chrono::seconds limit) : state_{std::make_shared<state>()} {
  s.launch_host_func([st = state_, limit] {
    std::unique_lock lock{st->mutex};
    st->reached = true;
    st->changed.notify_all();
    st->timed_out = !st->changed.wait_for(lock, limit, [&] { return st->open; });
  });
}

stream_latch::~stream_latch() {
  release();
  if (timed_out())
    ADD_FAILURE() << "a stream_latch was not released within its limit: the test blocked on the held stream";
}

void stream_latch::release() {
  std::lock_guard lock{state_->mutex};
  state_->open = true;
  state_->changed.notify_all();
}

bool stream_latch::reached() const {
  std::lock_guard lock{state_->mutex};
  return state_->reached;
}

bool stream_latch::timed_out() const {
  std::lock_guard lock{state_->mutex};
  return state_->timed_out;
}

}  // namespace syncmem::test
