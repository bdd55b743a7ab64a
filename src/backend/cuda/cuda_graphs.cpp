#include "backend/cuda/cuda_graphs.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <exception>
#include <unordered_set>

#include <fmt/format.h>

#include "backend/cuda/cuda_handles.hpp"
#include "backend/cuda/driver_api.hpp"
#include "core/log.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::cuda {
namespace {

cudaGraphExec_t native(graph_handle graph) noexcept { return pointer_of<cudaGraphExec_t>(graph); }

// A host function recorded into a graph: run at every launch, released with
// the graph through a CUDA user object.
struct captured_call {
  host_func fn;
  void* user_data;
  host_func release;
};

void CUDART_CB run_captured_call(void* data) {
  auto* call = static_cast<captured_call*>(data);
  try {
    call->fn(call->user_data);
  } catch (const std::exception& e) {
    logger().error("a host function launched by a CUDA graph threw: {}", e.what());
  } catch (...) {
    logger().error("a host function launched by a CUDA graph threw");
  }
}

void CUDART_CB release_captured_call(void* data) {
  auto* call = static_cast<captured_call*>(data);
  call->release(call->user_data);
  delete call;
}

}  // namespace

bool cuda_graphs::stream_capturing(int, stream_handle s) {
  if (const auto query = driver().stream_is_capturing) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver_did(query(native(s), &status), "cuStreamIsCapturing(s, &status)", __FILE__, __LINE__)) {
      return status != CU_STREAM_CAPTURE_STATUS_NONE;
    }
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  SYNCMEM_CUDA_TRY(cudaStreamIsCapturing(native(s), &status));
  return status != cudaStreamCaptureStatusNone;
}

// Thread-local mode: CUDA then refuses the calls that are unsafe in capture
// (cudaMalloc, synchronisation, queries) made by the capturing thread, which
// is where syncmem must prove itself capture-safe, without failing the
// other threads' ordinary work as the global mode would. The capture must be
// ended on the thread that began it.
void cuda_graphs::begin_capture(int, stream_handle s) {
  SYNCMEM_CUDA_TRY(cudaStreamBeginCapture(native(s), cudaStreamCaptureModeThreadLocal));
}

graph_handle cuda_graphs::end_capture(int, stream_handle s) {
  cudaGraph_t graph = nullptr;
  SYNCMEM_CUDA_TRY(cudaStreamEndCapture(native(s), &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  SYNCMEM_CUDA_CHECK_NOEXCEPT(cudaGraphDestroy(graph));  // the executable graph keeps what it needs
  SYNCMEM_CUDA_TRY(instantiated);
  return detail::handle_of<graph_handle>(exec);
}

void cuda_graphs::launch_graph(int, graph_handle graph, stream_handle s) {
  SYNCMEM_CUDA_TRY(cudaGraphLaunch(native(graph), native(s)));
}

void cuda_graphs::destroy_graph(int, graph_handle graph) noexcept {
  SYNCMEM_CUDA_CHECK_NOEXCEPT(cudaGraphExecDestroy(native(graph)));
}

unsigned long long cuda_graphs::capture_sequence(int, stream_handle s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (s == stream_handle{}) return 0;  // the legacy default stream cannot be captured
  if (cudaStreamGetCaptureInfo(native(s), &status, &id) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

std::optional<std::vector<capture_node>> cuda_graphs::capture_frontier(int, stream_handle s) {
  if (s == stream_handle{}) return std::nullopt;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  std::size_t count = 0;
  if (cudaStreamGetCaptureInfo(native(s), &status, nullptr, nullptr, &deps, nullptr, &count) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  if (status != cudaStreamCaptureStatusActive) return std::nullopt;
  std::vector<capture_node> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) out.push_back(detail::handle_of<capture_node>(deps[i]));
  return out;
}

bool cuda_graphs::capture_follows(int index, stream_handle s, const std::vector<capture_node>& nodes) {
  const auto frontier = capture_frontier(index, s);
  if (!frontier) return false;
  std::unordered_set<cudaGraphNode_t> wanted;
  for (const capture_node n : nodes) wanted.insert(pointer_of<cudaGraphNode_t>(n));
  // Breadth first up the edges; a graph too large to walk here is not proven ordered.
  constexpr std::size_t max_walk = 1U << 14U;
  std::vector<cudaGraphNode_t> todo;
  for (const capture_node n : *frontier) todo.push_back(pointer_of<cudaGraphNode_t>(n));
  std::unordered_set<cudaGraphNode_t> seen{todo.begin(), todo.end()};
  std::vector<cudaGraphNode_t> parents;
  for (std::size_t next = 0; next < todo.size() && !wanted.empty(); ++next) {
    if (next == max_walk) return false;
    cudaGraphNode_t node = todo[next];
    wanted.erase(node);
    std::size_t count = 0;
    if (cudaGraphNodeGetDependencies(node, nullptr, nullptr, &count) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    parents.resize(count);
    if (count > 0 && cudaGraphNodeGetDependencies(node, parents.data(), nullptr, &count) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    for (cudaGraphNode_t p : parents) {
      if (seen.insert(p).second) todo.push_back(p);
    }
  }
  return wanted.empty();
}

void cuda_graphs::capture_host_func(int index, stream_handle s, host_func fn, void* user_data, host_func release) {
  auto* call = new captured_call{fn, user_data, release};
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaError_t queried = cudaStreamGetCaptureInfo(native(s), &status, nullptr, &graph);
  if (queried != cudaSuccess || status != cudaStreamCaptureStatusActive) release_captured_call(call);
  SYNCMEM_CUDA_TRY(queried);
  SYNCMEM_EXPECTS(status == cudaStreamCaptureStatusActive,
                  fmt::format("capture_host_func: the stream of cuda:{} is not being captured", index));
  cudaUserObject_t object = nullptr;
  const cudaError_t created =
      cudaUserObjectCreate(&object, call, release_captured_call, 1, cudaUserObjectNoDestructorSync);
  if (created != cudaSuccess) release_captured_call(call);
  SYNCMEM_CUDA_TRY(created);
  const cudaError_t retained = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
  if (retained != cudaSuccess) SYNCMEM_CUDA_CHECK_NOEXCEPT(cudaUserObjectRelease(object, 1));
  SYNCMEM_CUDA_TRY(retained);
  // The graph owns the call now, and releases it with itself even if this launch fails.
  SYNCMEM_CUDA_TRY(cudaLaunchHostFunc(native(s), run_captured_call, call));
}

}  // namespace syncmem::detail::cuda
