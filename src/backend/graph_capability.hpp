#pragma once

// Stream capture into graphs, a capability a backend may offer: see
// backend::graphs() and include/syncmem/graph.hpp.

#include <optional>
#include <vector>

#include "backend/handles.hpp"

namespace syncmem::detail {

using host_func = void (*)(void*);

// While a stream is captured the work enqueued on it is recorded, not run.
// end_capture returns an executable graph (cudaGraphExec_t for CUDA), launched
// as one piece of work on a stream of the device and destroyed by
// destroy_graph. backend::launch_host_func refuses a capturing stream (its
// function runs once and is then freed); capture_host_func records
// `fn(user_data)` to run at every launch and calls `release(user_data)` once
// the graph and every launch of it are gone (it owns user_data from the call
// on: release runs also when it throws).
class graph_capability {
 public:
  graph_capability() = default;
  graph_capability(const graph_capability&) = delete;
  graph_capability& operator=(const graph_capability&) = delete;
  virtual ~graph_capability() = default;

  // Whether `s` is being captured into a graph (cudaStreamIsCapturing).
  [[nodiscard]] virtual bool stream_capturing(int index, stream_handle s) = 0;
  virtual void begin_capture(int index, stream_handle s) = 0;
  [[nodiscard]] virtual graph_handle end_capture(int index, stream_handle s) = 0;
  virtual void launch_graph(int index, graph_handle graph, stream_handle s) = 0;
  virtual void destroy_graph(int index, graph_handle graph) noexcept = 0;
  virtual void capture_host_func(int index, stream_handle s, host_func fn, void* user_data, host_func release) = 0;
  // The number of the capture `s` takes part in (CUDA's capture sequence id,
  // the same for every stream a capture has forked to), or 0 when `s` is not
  // being captured or the backend cannot fork captures.
  [[nodiscard]] virtual unsigned long long capture_sequence(int index, stream_handle s) = 0;
  // The nodes that work enqueued next on `s` would depend on in its capture
  // (cudaStreamGetCaptureInfo's dependencies), or nullopt when `s` is not
  // being captured or the backend cannot tell (the base class).
  [[nodiscard]] virtual std::optional<std::vector<capture_node>> capture_frontier(int /*index*/, stream_handle /*s*/) {
    return std::nullopt;
  }
  // Whether work enqueued next on `s` would run after every one of `nodes`,
  // nodes of the capture `s` takes part in: a walk up the graph's edges from
  // the frontier of `s`. False when it cannot tell (the base class).
  [[nodiscard]] virtual bool capture_follows(int /*index*/, stream_handle /*s*/,
                                             const std::vector<capture_node>& /*nodes*/) {
    return false;
  }
};

}  // namespace syncmem::detail
