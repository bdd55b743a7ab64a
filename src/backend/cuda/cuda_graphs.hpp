#pragma once

#include "backend/graph_capability.hpp"

namespace syncmem::detail::cuda {

// Stream capture into CUDA graphs (cudaStreamBeginCapture, cudaGraphExec_t).
class cuda_graphs final : public graph_capability {
 public:
  [[nodiscard]] bool stream_capturing(int index, stream_handle s) override;
  void begin_capture(int index, stream_handle s) override;
  [[nodiscard]] graph_handle end_capture(int index, stream_handle s) override;
  void launch_graph(int index, graph_handle graph, stream_handle s) override;
  void destroy_graph(int index, graph_handle graph) noexcept override;
  void capture_host_func(int index, stream_handle s, host_func fn, void* user_data, host_func release) override;
  [[nodiscard]] unsigned long long capture_sequence(int index, stream_handle s) override;
  [[nodiscard]] std::optional<std::vector<capture_node>> capture_frontier(int index, stream_handle s) override;
  [[nodiscard]] bool capture_follows(int index, stream_handle s, const std::vector<capture_node>& nodes) override;
};

}  // namespace syncmem::detail::cuda
