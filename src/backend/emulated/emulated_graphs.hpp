#pragma once

#include "backend/graph_capability.hpp"

namespace syncmem::detail::emulated {

class emulated_backend;

// Stream capture on emulated devices: a capturing worker_stream records its
// operations, and a graph enqueues them again at each launch.
class emulated_graphs final : public graph_capability {
 public:
  explicit emulated_graphs(emulated_backend& backend) noexcept : backend_{backend} {}

  [[nodiscard]] bool stream_capturing(int index, stream_handle s) override;
  void begin_capture(int index, stream_handle s) override;
  [[nodiscard]] graph_handle end_capture(int index, stream_handle s) override;
  void launch_graph(int index, graph_handle graph, stream_handle s) override;
  void destroy_graph(int index, graph_handle graph) noexcept override;
  void capture_host_func(int index, stream_handle s, host_func fn, void* user_data, host_func release) override;
  [[nodiscard]] unsigned long long capture_sequence(int index, stream_handle s) override;
  [[nodiscard]] std::optional<std::vector<capture_node>> capture_frontier(int index, stream_handle s) override;
  [[nodiscard]] bool capture_follows(int index, stream_handle s, const std::vector<capture_node>& nodes) override;

 private:
  emulated_backend& backend_;
};

}  // namespace syncmem::detail::emulated
