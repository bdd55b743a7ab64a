#pragma once

#include "backend/graph_capability.hpp"

namespace syncmem::detail::cuda {

// Stream capture into CUDA graphs (cudaStreamBeginCapture, cudaGraphExec_t).
class cuda_graphs final : public graph_capability {
 public:
  [[nodiscard]] bool stream_capturing(int index, CUstream_st* s) override;
  void begin_capture(int index, CUstream_st* s) override;
  [[nodiscard]] graph_handle end_capture(int index, CUstream_st* s) override;
  void launch_graph(int index, graph_handle graph, CUstream_st* s) override;
  void destroy_graph(int index, graph_handle graph) noexcept override;
  void capture_host_func(int index, CUstream_st* s, host_func fn, void* user_data, host_func release) override;
  [[nodiscard]] unsigned long long capture_sequence(int index, CUstream_st* s) override;
};

}  // namespace syncmem::detail::cuda
