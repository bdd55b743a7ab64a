#pragma once

// An emulated stream: a worker thread that runs its operations one after the
// other, in the order they were enqueued, each after an optional random delay.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace syncmem::detail::emulated {

class capture_graph;
struct capture_ended;

// Whether this process was forked after a worker_stream had started: its
// threads are not in the child, whose devices then refuse all use (as CUDA's
// do in a forked child) instead of waiting forever.
[[nodiscard]] bool forked_after_workers_started() noexcept;

class worker_stream {
 public:
  // max_delay_us is read before every operation, so that the delay can be
  // changed while streams run.
  worker_stream(int device, const std::atomic<std::int64_t>& max_delay_us);
  ~worker_stream();  // runs what is queued, then stops

  worker_stream(const worker_stream&) = delete;
  worker_stream& operator=(const worker_stream&) = delete;

  // Runs `op` in stream order; while the stream is captured, records it instead.
  void enqueue(std::function<void()> op);
  // Enqueues `ops` in order as one submission (a graph launch), or records
  // them while the stream is captured.
  void enqueue_all(const std::vector<std::function<void()>>& ops);
  // Enqueues `op` to run in stream order even while the stream is captured:
  // for bookkeeping that must not become part of a graph.
  void enqueue_uncaptured(std::function<void()> op);

  // Stream capture: between begin_capture() and end_capture(), enqueue()
  // records operations instead of running them. end_capture() returns them,
  // or throws syncmem::logic_error when invalidate_capture() was called or a
  // stream forked into the capture was not joined back (the capture is over
  // either way, as with cudaStreamEndCapture).
  void begin_capture();
  [[nodiscard]] std::vector<std::function<void()>> end_capture();
  [[nodiscard]] bool capturing();
  // The capture this stream takes part in (began or was forked into), or null.
  [[nodiscard]] std::shared_ptr<capture_graph> capture();
  // Waits for `nodes` of capture `g` (an event recorded in it): a stream
  // outside any capture is forked into `g`. Throws syncmem::unsupported_error
  // for a stream of another capture.
  void join(const std::shared_ptr<capture_graph>& g, const std::vector<std::size_t>& nodes);
  // Makes the open capture fail at end_capture() with `why`; the first reason wins.
  void invalidate_capture(const std::string& why);
  // Waits for everything enqueued so far. Throws syncmem::logic_error if an
  // operation threw since the last synchronize().
  void synchronize();
  // Waits for everything enqueued so far and leaves a failure for the next
  // synchronize() to report: for waits that are not the user's.
  void wait_idle();
  [[nodiscard]] bool ready();
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  void run();
  // Ends capture `g`, begun on this stream, for every stream forked into it.
  static capture_ended leave(capture_graph& g);

  int device_;
  const std::atomic<std::int64_t>& max_delay_us_;
  std::mutex mutex_;
  std::condition_variable work_available_;
  std::condition_variable work_done_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t enqueued_ = 0;
  std::uint64_t completed_ = 0;
  bool stopping_ = false;
  std::string error_;
  std::shared_ptr<capture_graph> capture_;
  std::thread thread_;
};

// The state behind an emulated event. Each record is a generation; a wait
// or synchronize captures the generation recorded at that moment and waits for
// exactly it (as CUDA does), even if the event is recorded again meanwhile on
// another stream whose record completes first.
struct event_state {
  std::mutex mutex;
  std::condition_variable completed_changed;
  std::uint64_t recorded = 0;          // the latest generation
  std::set<std::uint64_t> pending;     // generations recorded but not yet reached
  std::uint64_t latest_completed = 0;  // for timing: the highest generation reached
  std::chrono::steady_clock::time_point completed_at{};
  bool timing = false;
  // Where the latest record was made in a capture: the capture, and the
  // nodes a wait for it depends on; null for a record outside captures.
  std::shared_ptr<capture_graph> captured_in;
  std::vector<std::size_t> captured_after;

  // Under mutex: whether generation g has been reached (0: never recorded).
  [[nodiscard]] bool reached(std::uint64_t g) const { return g == 0 || !pending.contains(g); }
};

}  // namespace syncmem::detail::emulated
