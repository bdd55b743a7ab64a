#pragma once

// Acting on device memory in stream order, on either kind of device: a kernel
// on CUDA devices, a host function on emulated ones.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include "syncmem/stream.hpp"

namespace syncmem::test {

// Writes pattern_byte(seed, i) to p[i] for i in [0, bytes), in stream order.
void device_fill_pattern(stream_view s, void* p, std::size_t bytes, std::uint64_t seed);
// Adds `delta` to each byte of p[0, bytes) in stream order (a read-modify-write).
void device_add_bytes(stream_view s, void* p, std::size_t bytes, std::uint8_t delta);
// Keeps the stream busy for about `duration`, to widen race windows (for
// stress, never to decide an outcome: use stream_latch for that).
void device_sleep(stream_view s, std::chrono::microseconds duration);

// Holds a stream at a point of its order, on a host-side latch: until
// release(), the work enqueued on it after the latch is certainly still
// queued, on any machine and under any tool. Released at destruction too. A
// latch never released lets go after `limit` and fails the test, so that a
// broken test fails instead of hanging.
class stream_latch;

// Whether streams may be held on a host latch. compute-sanitizer initcheck
// makes enqueueing wait for the work before it, so that a test blocks in the
// enqueue behind its own latch; scripts/gpu-check sets SYNCMEM_NO_STREAM_HOLDS
// for that tool, and the tests that hold a stream skip, saying why.
[[nodiscard]] bool stream_holds_allowed();

// Runs `f` on another thread while `hold` keeps its stream, and lets the
// stream go once `f` has returned or has been blocked a while; returns what
// `f` returned. Whether `f` saw the held work is decided by what it returns,
// never by the time it took.
template <class F>
auto while_held(stream_latch& hold, F f);

class stream_latch {
 public:
  explicit stream_latch(stream_view s, std::chrono::seconds limit = std::chrono::seconds{30});
  ~stream_latch();
  stream_latch(const stream_latch&) = delete;
  stream_latch& operator=(const stream_latch&) = delete;

  void release();
  // Whether the stream has reached the latch (the work before it is done).
  [[nodiscard]] bool reached() const;
  [[nodiscard]] bool timed_out() const;

 private:
  struct state;
  std::shared_ptr<state> state_;
};
// Reads n bytes of device memory into host memory, in order on s (pageable
// memory through the backend's own copy: complete when it returns).
[[nodiscard]] std::vector<std::uint8_t> read_device(stream_view s, const void* p, std::size_t n);

// The CUDA halves, in device_ops.cu (absent without CUDA).
namespace cuda_ops {
void fill_pattern(stream_view s, void* p, std::size_t bytes, std::uint64_t seed);
void add_bytes(stream_view s, void* p, std::size_t bytes, std::uint8_t delta);
void sleep(stream_view s, std::chrono::microseconds duration);
// Captures what `enqueue` puts on `s` into a CUDA graph (relaxed mode, so that
// the engine may still ask the driver about pointers), calls `before_launch`,
// then launches the graph on `s` and waits for it. The capture is ended even
// when `enqueue` throws, and the exception goes on.
void capture_and_launch(stream_view s, const std::function<void()>& enqueue,
                        const std::function<void()>& before_launch);
// Sets this thread's stream capture mode and returns the one it had
// (cudaThreadExchangeStreamCaptureMode); the values are cudaStreamCaptureMode's.
inline constexpr int capture_mode_global = 0;
inline constexpr int capture_mode_thread_local = 1;
[[nodiscard]] int exchange_capture_mode(int mode);
}  // namespace cuda_ops

template <class F>
auto while_held(stream_latch& hold, F f) {
  auto result = std::async(std::launch::async, std::move(f));
  (void)result.wait_for(std::chrono::milliseconds{100});
  hold.release();
  return result.get();
}

}  // namespace syncmem::test

// First in a test that holds a stream on a stream_latch: skips the test where
// holding is not allowed (see stream_holds_allowed).
#define SYNCMEM_REQUIRE_STREAM_HOLDS()                                                                \
  do {                                                                                                \
    if (!::syncmem::test::stream_holds_allowed()) {                                                   \
      GTEST_SKIP() << "holds a stream on a host latch, which SYNCMEM_NO_STREAM_HOLDS rules out here"; \
    }                                                                                                 \
  } while (false)
