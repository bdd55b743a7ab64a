#pragma once

/// @file graph.hpp
/// @brief Stream capture and replay: the work enqueued on a stream between
/// begin_capture() and end_capture() is recorded, not run, into a `graph`
/// that can then be launched any number of times.
///
/// On a CUDA device this is CUDA stream capture (cudaStreamBeginCapture in
/// the thread-local mode, cudaStreamEndCapture, cudaGraphInstantiate,
/// cudaGraphLaunch). On an emulated device the stream records the copies,
/// memsets and host functions enqueued on it and a launch enqueues them in
/// order. What can be captured, and what is refused, is in docs/graphs.md.
///
/// @code
/// syncmem::stream s{device};
/// syncmem::begin_capture(s);
/// (void)syncmem::copy_async(dst, src, bytes, s);  // pinned or device memory: recorded, not run
/// syncmem::graph step = syncmem::end_capture(s);
/// for (int i = 0; i < 100; ++i) step.launch(s);    // copies at each launch
/// @endcode

#include <memory>

#include "syncmem/device_id.hpp"
#include "syncmem/graph_pool.hpp"

namespace syncmem {

class stream_view;
class graph;

/// @brief Starts capturing `s`: work enqueued on it afterwards is recorded
/// into a graph instead of run, until end_capture(s). On CUDA the capture
/// must be ended on the thread that began it, and that thread may not make
/// the calls CUDA forbids during capture (synchronizing, querying).
/// @throws syncmem::logic_error when `s` is a default stream (CUDA cannot
/// capture its legacy default stream) or is already being captured.
void begin_capture(stream_view s);

/// @brief The same, with the device allocations made on `s` during the
/// capture served from `pool` (shared with other graphs captured into it;
/// see graph_pool.hpp). begin_capture(s) uses a new pool of its own.
/// @throws syncmem::logic_error as begin_capture(s)
void begin_capture(stream_view s, const graph_pool& pool);

/// @brief Ends the capture of `s` and returns what it recorded, ready to launch.
/// The capture is over even when this throws.
/// @throws syncmem::logic_error when `s` is not being captured, or when the
/// capture was invalidated by an operation that is illegal in capture
/// (syncmem::cuda_error with cudaErrorStreamCaptureInvalidated on CUDA).
[[nodiscard]] graph end_capture(stream_view s);

/// @brief Whether `s` is being captured (cudaStreamIsCapturing).
[[nodiscard]] bool is_capturing(stream_view s);

/// @brief An executable graph: the work captured from a stream, launched as
/// one piece of work on any stream of its device. Move-only; an empty
/// (default-made or moved-from) graph cannot be launched. Destroying it while
/// launches are in flight is safe: they run to completion, and what they
/// need (a captured host function) is released after the last one.
class graph {
 public:
  /// @brief An empty graph.
  graph() noexcept = default;
  ~graph();

  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;
  graph(graph&& other) noexcept;
  graph& operator=(graph&& other) noexcept;

  /// @brief Enqueues the captured work on `s`, in the order it was captured.
  /// @throws syncmem::logic_error on an empty graph, when `s` belongs to
  /// another device than the graph (names both), or when `s` is being
  /// captured (a launch inside a capture is not supported).
  void launch(stream_view s) const;

  /// @brief Whether this holds a graph.
  [[nodiscard]] bool empty() const noexcept { return handle_ == nullptr; }
  /// @brief The device whose stream was captured.
  [[nodiscard]] device_id device() const noexcept { return device_; }
  /// @brief The pool that the capture's allocations came from, to capture
  /// another graph into (PyTorch's `pool=graph.pool()`).
  /// @throws syncmem::logic_error on an empty graph
  [[nodiscard]] graph_pool pool() const;

 private:
  friend graph end_capture(stream_view s);
  graph(device_id device, void* handle, std::shared_ptr<detail::graph_pool_state> pool) noexcept
      : device_{device}, handle_{handle}, pool_{std::move(pool)} {}
  void reset() noexcept;

  device_id device_ = device_id::cuda(0);
  void* handle_ = nullptr;
  std::shared_ptr<detail::graph_pool_state> pool_;  // what the graph's allocations came from, kept while it lives
};

}  // namespace syncmem
