#include "backend/emulated/emulated_graphs.hpp"

#include <functional>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "backend/emulated/capture_graph.hpp"
#include "backend/emulated/emulated_backend.hpp"
#include "core/ignored_failure.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::emulated {
namespace {

// An executable graph: the operations recorded, enqueued in order at each launch.
struct recorded_graph {
  int device;
  std::vector<std::function<void()>> ops;
};

recorded_graph* graph_of(graph_handle graph) noexcept { return pointer_of<recorded_graph*>(graph); }

// A node's handle is its place in the capture plus one, so that none is 0.
capture_node handle_of_node(capture_graph::node_id n) noexcept { return capture_node{n + 1}; }
capture_graph::node_id node_of(capture_node h) noexcept { return static_cast<capture_graph::node_id>(h) - 1; }

}  // namespace

bool emulated_graphs::stream_capturing(int index, stream_handle s) { return backend_.to_stream(s, index).capturing(); }

void emulated_graphs::begin_capture(int index, stream_handle s) {
  auto& w = backend_.to_stream(s, index);
  SYNCMEM_EXPECTS(&w != backend_.device(index).default_stream.load(std::memory_order_acquire),
                  fmt::format("begin_capture: the default stream of emulated:{} cannot be captured (as CUDA's legacy "
                              "default stream cannot)",
                              index));
  w.begin_capture();
}

graph_handle emulated_graphs::end_capture(int index, stream_handle s) {
  return handle_of<graph_handle>(new recorded_graph{index, backend_.to_stream(s, index).end_capture()});
}

void emulated_graphs::launch_graph(int index, graph_handle graph, stream_handle s) {
  auto& g = *graph_of(graph);
  SYNCMEM_EXPECTS(g.device == index, fmt::format("launch: a graph of emulated:{} cannot be launched on a stream of "
                                                 "emulated:{}",
                                                 g.device, index));
  backend_.to_stream(s, index).enqueue_all(g.ops);
}

// The operations queued by earlier launches hold copies of what they need.
void emulated_graphs::destroy_graph(int index, graph_handle graph) noexcept {
  try {
    backend_.refuse_in_any_capture(index, "destroy_graph (cudaGraphExecDestroy)");
  } catch (...) {
    log_ignored("destroying a graph");  // not destroyed, as CUDA leaves it
    return;
  }
  delete graph_of(graph);
}

unsigned long long emulated_graphs::capture_sequence(int index, stream_handle s) {
  const auto g = backend_.to_stream(s, index).capture();
  return g ? g->id() : 0;
}

std::optional<std::vector<capture_node>> emulated_graphs::capture_frontier(int index, stream_handle s) {
  auto& w = backend_.to_stream(s, index);
  const auto g = w.capture();
  if (!g) return std::nullopt;
  std::vector<capture_node> out;
  for (const auto n : g->frontier(&w)) out.push_back(handle_of_node(n));
  return out;
}

bool emulated_graphs::capture_follows(int index, stream_handle s, const std::vector<capture_node>& nodes) {
  auto& w = backend_.to_stream(s, index);
  const auto g = w.capture();
  if (!g) return false;
  std::vector<capture_graph::node_id> ids;
  ids.reserve(nodes.size());
  for (const capture_node h : nodes) ids.push_back(node_of(h));
  return g->follows(&w, ids);
}

void emulated_graphs::capture_host_func(int index, stream_handle s, host_func fn, void* user_data, host_func release) {
  // Released when the graph and the copies queued by its launches are gone,
  // as a CUDA user object; at once when this throws.
  std::shared_ptr<void> data{user_data, release};
  auto& w = backend_.to_stream(s, index);
  SYNCMEM_EXPECTS(w.capturing(),
                  fmt::format("capture_host_func: the stream of emulated:{} is not being captured", index));
  w.enqueue([fn, data] { fn(data.get()); });
}

}  // namespace syncmem::detail::emulated
