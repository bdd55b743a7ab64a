// The CUDA backend: the CUDA runtime behind the backend interface.

#include <cuda_runtime_api.h>

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <exception>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "backend/cuda/copy_kernels.hpp"
#include "backend/cuda/cuda_graphs.hpp"
#include "backend/cuda/cuda_handles.hpp"
#include "backend/cuda/cuda_ipc.hpp"
#include "backend/cuda/cuda_pools.hpp"
#include "backend/cuda/cuda_vmm.hpp"
#include "backend/cuda/driver_api.hpp"
#include "core/log.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail {

const char* cuda_error_name(int code) noexcept { return cudaGetErrorName(static_cast<cudaError_t>(code)); }
const char* cuda_error_message(int code) noexcept { return cudaGetErrorString(static_cast<cudaError_t>(code)); }
void cuda_clear_last_error() noexcept { (void)cudaGetLastError(); }
bool cuda_is_shutting_down(int code) noexcept {
  return code == cudaErrorCudartUnloading || code == cudaErrorContextIsDestroyed;
}

namespace cuda {
namespace {

// A PCIe link speed as sysfs writes it ("32.0 GT/s PCIe") to a generation.
int pcie_generation_of(const std::string& speed) {
  const double gts = std::atof(speed.c_str());
  if (gts >= 60) return 6;
  if (gts >= 30) return 5;
  if (gts >= 15) return 4;
  if (gts >= 7.5) return 3;
  if (gts >= 4.5) return 2;
  if (gts >= 2) return 1;
  return 0;
}

std::string read_line(const std::string& path) {
  std::ifstream in{path};
  std::string line;
  std::getline(in, line);
  return line;
}

struct host_call {
  host_func fn;
  void* user_data;
};

void CUDART_CB run_host_call(void* data) {
  auto* call = static_cast<host_call*>(data);
  try {
    call->fn(call->user_data);
  } catch (const std::exception& e) {
    logger().error("a host function enqueued on a CUDA stream threw: {}", e.what());
  } catch (...) {
    logger().error("a host function enqueued on a CUDA stream threw");
  }
  delete call;
}

// While it lives, the calling thread may make calls that the thread-local and
// global capture modes refuse (cudaMalloc, pointer queries) without failing a
// capture it has open: they are not stream work, so nothing of them belongs in
// the graph (PyTorch's caching allocator grows its graph pools the same way).
class relaxed_capture_mode {
 public:
  relaxed_capture_mode() noexcept { (void)cudaThreadExchangeStreamCaptureMode(&previous_); }
  ~relaxed_capture_mode() { (void)cudaThreadExchangeStreamCaptureMode(&previous_); }
  relaxed_capture_mode(const relaxed_capture_mode&) = delete;
  relaxed_capture_mode& operator=(const relaxed_capture_mode&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};

// This thread's pointer queries within backend::begin_pointer_queries (and
// the capture mode to restore at the end): they run in relaxed capture mode
// already, set once, because the exchange costs two fifths of a query of
// pageable memory (H100: 0.13 of 0.35 us).
thread_local int pointer_queries_depth = 0;
thread_local cudaStreamCaptureMode pointer_queries_mode = cudaStreamCaptureModeRelaxed;

// What the runtime knows of `p`, without its allocation's range: for
// drivers that lack the entry points syncmem loads.
std::optional<pointer_attributes> runtime_pointer_info(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  pointer_attributes a;
  switch (attr.type) {
    case cudaMemoryTypeHost:
      a.kind = memory_kind::pinned_host;
      break;
    case cudaMemoryTypeDevice:
      a.kind = memory_kind::device;
      break;
    case cudaMemoryTypeManaged:
      a.kind = memory_kind::managed;
      break;
    default:
      return std::nullopt;  // unregistered: pageable
  }
  if (attr.device >= 0) a.device = device_id::cuda(attr.device);
  return a;
}

// Why cudaGetDeviceCount found no GPU, in words a user can act on: the
// runtime reports a machine without NVIDIA's driver as a driver too old.
std::string no_gpu_reason(cudaError_t status) {
  const auto code = fmt::format("{}: {}", cudaGetErrorName(status), cudaGetErrorString(status));
  if (status == cudaErrorInsufficientDriver) {
    if (void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); driver == nullptr) {
      return "no NVIDIA driver is installed (no GPU)";
    } else {
      ::dlclose(driver);
    }
    return fmt::format("the NVIDIA driver is older than this CUDA runtime needs: update the driver ({})", code);
  }
  if (status == cudaErrorNoDevice) return "the NVIDIA driver finds no GPU";
  return fmt::format("the CUDA runtime finds no GPU ({})", code);
}

class backend_impl final : public backend {
 public:
  device_kind kind() const noexcept override { return device_kind::cuda; }
  const backend_traits& traits() const noexcept override {
    static constexpr backend_traits t{.keeps_current_device = true,
                                      .pins_for_all_backends = true,
                                      .events_reusable_before_completion = true,
                                      .copies_managed_memory = true,
                                      .pageable_copies_may_read_early = true,
                                      .deallocate_waits_for_device = true,
                                      .has_copy_kernel = true};
    return t;
  }

  int device_count() noexcept override {
    std::call_once(count_once_, [this] {
      int n = 0;
      const cudaError_t status = cudaGetDeviceCount(&n);
      if (status != cudaSuccess) {
        cudaGetLastError();
        count_ = 0;
        why_ = no_gpu_reason(status);
      } else {
        count_ = n;
        if (n == 0) why_ = "the CUDA runtime finds no GPU";
      }
    });
    return count_;
  }

  std::string why_no_devices() override {
    (void)device_count();
    return why_;
  }

  device_properties properties(int index) override {
    cudaDeviceProp prop{};
    SYNCMEM_CUDA_TRY(cudaGetDeviceProperties(&prop, index));
    device_properties p;
    p.id = device_id::cuda(index);
    p.name = prop.name;
    p.total_memory = prop.totalGlobalMem;
    p.compute_capability_major = prop.major;
    p.compute_capability_minor = prop.minor;
    p.multiprocessors = prop.multiProcessorCount;
    p.async_engines = prop.asyncEngineCount;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, index) == cudaSuccess) {
      p.pci_bus_id = bus;
      std::string lower = p.pci_bus_id;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
      const std::string dir = "/sys/bus/pci/devices/" + lower + "/";
      p.pcie_generation = pcie_generation_of(read_line(dir + "current_link_speed"));
      p.pcie_width = std::atoi(read_line(dir + "current_link_width").c_str());
    } else {
      cudaGetLastError();
    }
    const auto& api = driver();
    int vmm = 0;
    if (api.loaded && api.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, index) ==
                          CUDA_SUCCESS) {
      p.supports_virtual_memory = vmm != 0;
    }
    return p;
  }

  memory_info memory(int) override {
    std::size_t free = 0;
    std::size_t total = 0;
    SYNCMEM_CUDA_TRY(cudaMemGetInfo(&free, &total));
    return {free, total};
  }

  void synchronize_device(int) override { SYNCMEM_CUDA_TRY(cudaDeviceSynchronize()); }
  void make_current(int index) override { SYNCMEM_CUDA_TRY(cudaSetDevice(index)); }
  int current_index() override {
    // The device of the context current on this thread is the runtime's
    // current device; without one, the runtime's own answer (device 0 or the
    // one set last).
    if (const auto get = driver().ctx_get_device; get != nullptr) {
      CUdevice device = 0;
      if (get(&device) == CUDA_SUCCESS) return static_cast<int>(device);
    }
    int index = 0;
    SYNCMEM_CUDA_TRY(cudaGetDevice(&index));
    return index;
  }

  // ---- memory ----------------------------------------------------------------
  void* allocate(int, std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t status = [&] {
      const relaxed_capture_mode relaxed;  // a capture open on this thread: the allocation is not part of it
      return cudaMalloc(&p, bytes);
    }();
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    SYNCMEM_CUDA_TRY(status);
    return p;
  }

  void deallocate(int, void* p, std::size_t) noexcept override { SYNCMEM_CUDA_CHECK_NOEXCEPT(cudaFree(p)); }

  void* allocate_pinned(std::size_t bytes, unsigned flags) override {
    void* p = nullptr;
    const cudaError_t status = cudaHostAlloc(&p, bytes, flags);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    SYNCMEM_CUDA_TRY(status);
    return p;
  }

  void deallocate_pinned(void* p, std::size_t) noexcept override { SYNCMEM_CUDA_CHECK_NOEXCEPT(cudaFreeHost(p)); }

  void register_host(void* p, std::size_t bytes, unsigned flags) override {
    const cudaError_t status = cudaHostRegister(p, bytes, flags);
    if (status == cudaErrorHostMemoryAlreadyRegistered) {
      cudaGetLastError();
      // A caller's mistake, like the emulated registry's overlap, not a device failure.
      SYNCMEM_FAIL(
          fmt::format("register_host: [{}, +{}) overlaps memory that is already registered "
                      "(cudaErrorHostMemoryAlreadyRegistered)",
                      p, bytes));
    }
    SYNCMEM_CUDA_TRY(status);
  }

  void unregister_host(void* p) noexcept override { SYNCMEM_CUDA_CHECK_NOEXCEPT(cudaHostUnregister(p)); }

  // ---- streams ---------------------------------------------------------------
  stream_handle create_stream(int, bool non_blocking, int priority) override {
    cudaStream_t s = nullptr;
    SYNCMEM_CUDA_TRY(
        cudaStreamCreateWithPriority(&s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, priority));
    return handle_of(s);
  }

  void destroy_stream(int, stream_handle s) noexcept override {
    SYNCMEM_CUDA_CHECK_NOEXCEPT(cudaStreamDestroy(native(s)));
  }
  stream_handle default_stream(int) override { return stream_handle{}; }  // the legacy default stream
  void synchronize_stream(int, stream_handle s) override {
    const auto sync = driver().stream_synchronize;
    if (sync != nullptr && driver_did(sync(native(s)), "cuStreamSynchronize(s)", __FILE__, __LINE__)) return;
    SYNCMEM_CUDA_TRY(cudaStreamSynchronize(native(s)));
  }

  bool stream_ready(int, stream_handle s) override {
    const cudaError_t status = cudaStreamQuery(native(s));
    if (status == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    SYNCMEM_CUDA_TRY(status);
    return true;
  }

  void launch_host_func(int index, stream_handle s, host_func fn, void* user_data) override {
    SYNCMEM_EXPECTS(!stream_capturing(index, s),
                    fmt::format("launch_host_func: the stream of cuda:{} is being captured, and a one-shot host "
                                "function cannot be recorded into a graph (use capture_host_func)",
                                index));
    auto* call = new host_call{fn, user_data};
    const cudaError_t status = cudaLaunchHostFunc(native(s), run_host_call, call);
    if (status != cudaSuccess) delete call;
    SYNCMEM_CUDA_TRY(status);
  }

  void memcpy_async(void* dst, const void* src, std::size_t bytes, int, stream_handle s) override {
    if (bytes == 0) return;
    const auto copy = driver().memcpy_async;  // with unified addressing, cudaMemcpyDefault's copy
    if (copy != nullptr &&
        driver_did(copy(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes, native(s)),
                   "cuMemcpyAsync(dst, src, bytes, s)", __FILE__, __LINE__)) {
      return;
    }
    SYNCMEM_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native(s)));
  }

  void memset_async(void* dst, int value, std::size_t bytes, int, stream_handle s) override {
    if (bytes == 0) return;
    SYNCMEM_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, native(s)));
  }

  bool memcpy_batch_async(void* const* dsts, const void* const* srcs, const std::size_t* sizes, std::size_t count, int,
                          stream_handle s) override {
#if CUDART_VERSION >= 12080
    // The batch API refuses the legacy default stream; a captured stream
    // takes the copies one by one (the batch call cannot be captured).
    if (count == 0 || s == stream_handle{} || !batch_supported_.load(std::memory_order_relaxed)) return false;
    if (stream_capturing(0, s)) return false;
    // Every source in stream order: a device source may still be written by
    // a kernel before the batch, and a host source by earlier work on `s`.
    cudaMemcpyAttributes attributes{};
    attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    std::size_t first = 0;
#if CUDART_VERSION >= 13000
    const cudaError_t status = cudaMemcpyBatchAsync(dsts, srcs, sizes, count, &attributes, &first, 1, native(s));
#else
    std::size_t failed = 0;
    const cudaError_t status =
        cudaMemcpyBatchAsync(const_cast<void**>(dsts), const_cast<void**>(srcs), const_cast<std::size_t*>(sizes), count,
                             &attributes, &first, 1, &failed, native(s));
#endif
    if (status == cudaErrorNotSupported || status == cudaErrorCallRequiresNewerDriver) {
      // A driver without the batch API: copy one by one from now on.
      cudaGetLastError();
      batch_supported_.store(false, std::memory_order_relaxed);
      return false;
    }
    SYNCMEM_CUDA_TRY(status);
    return true;
#else
    (void)dsts, (void)srcs, (void)sizes, (void)count, (void)s;
    return false;
#endif
  }

  bool copy_kernel_batch(void* const* dsts, const void* const* srcs, const std::size_t* sizes, std::size_t count,
                         int index, stream_handle s) override {
    if (count == 0 || !addresses_host_memory(index)) return false;
    launch_copy_kernels(dsts, srcs, sizes, count, native(s));
    return true;
  }

  bool pageable_uploads_read_at_return(int index) override {
    // Without ATS the driver stages pageable memory before the call returns;
    // through the host's page tables it may read it in stream order.
    return pageable_staged_.get(
        index, [](int i) { return attribute(cudaDevAttrPageableMemoryAccessUsesHostPageTables, i) == 0; });
  }

  void begin_pointer_queries() override {
    if (pointer_queries_depth++ == 0 && device_count() > 0) {
      pointer_queries_mode = cudaStreamCaptureModeRelaxed;
      (void)cudaThreadExchangeStreamCaptureMode(&pointer_queries_mode);
    }
  }

  void end_pointer_queries() noexcept override {
    if (--pointer_queries_depth == 0 && device_count() > 0) {
      (void)cudaThreadExchangeStreamCaptureMode(&pointer_queries_mode);
    }
  }

  // ---- events ----------------------------------------------------------------
  event_handle create_event(int, bool timing, bool blocking_sync) override {
    unsigned flags = timing ? cudaEventDefault : cudaEventDisableTiming;
    if (blocking_sync) flags |= cudaEventBlockingSync;
    cudaEvent_t e = nullptr;
    SYNCMEM_CUDA_TRY(cudaEventCreateWithFlags(&e, flags));
    return handle_of(e);
  }

  void destroy_event(int, event_handle e) noexcept override {
    SYNCMEM_CUDA_CHECK_NOEXCEPT(cudaEventDestroy(native(e)));
  }
  void record_event(int, event_handle e, stream_handle s) override {
    const auto record = driver().event_record;
    if (record != nullptr && driver_did(record(native(e), native(s)), "cuEventRecord(e, s)", __FILE__, __LINE__))
      return;
    SYNCMEM_CUDA_TRY(cudaEventRecord(native(e), native(s)));
  }

  bool event_ready(int, event_handle e) override {
    const cudaError_t status = cudaEventQuery(native(e));
    if (status == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    SYNCMEM_CUDA_TRY(status);
    return true;
  }

  void synchronize_event(int, event_handle e) override { SYNCMEM_CUDA_TRY(cudaEventSynchronize(native(e))); }
  void stream_wait_event(int, stream_handle s, event_handle e) override {
    SYNCMEM_CUDA_TRY(cudaStreamWaitEvent(native(s), native(e), 0));
  }

  float elapsed_ms(int, event_handle start, event_handle end) override {
    float ms = 0;
    SYNCMEM_CUDA_TRY(cudaEventElapsedTime(&ms, native(start), native(end)));
    return ms;
  }

  // ---- pointers --------------------------------------------------------------
  std::optional<pointer_attributes> pointer_info(const void* p) override {
    std::optional<relaxed_capture_mode> relaxed;  // the engine classifies pointers while a stream is being captured
    if (pointer_queries_depth == 0) relaxed.emplace();
    const auto& api = driver();
    if (!api.loaded) return runtime_pointer_info(p);
    // One driver call for all five, on every copy (it took three: the
    // runtime's cudaPointerGetAttributes and two range queries).
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned type = 0;
    unsigned managed = 0;
    int ordinal = -1;
    CUdeviceptr base = 0;
    size_t size = 0;
    void* values[] = {&type, &managed, &ordinal, &base, &size};
    // Memory CUDA does not know reads as type 0 with success.
    if (api.pointer_get_attributes(std::size(which), which, values, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) {
      return runtime_pointer_info(p);
    }
    pointer_attributes a;
    if (managed != 0) {
      a.kind = memory_kind::managed;
    } else if (type == CU_MEMORYTYPE_DEVICE) {
      a.kind = memory_kind::device;
    } else if (type == CU_MEMORYTYPE_HOST) {
      a.kind = memory_kind::pinned_host;
    } else {
      return std::nullopt;  // unregistered: pageable
    }
    if (ordinal >= 0) a.device = device_id::cuda(ordinal);
    if (base != 0 && size != 0) {
      a.base = reinterpret_cast<const void*>(base);
      a.size = size;
    }
    return a;
  }

  // ---- peers -----------------------------------------------------------------
  bool can_access_peer(int index, int peer) override {
    if (index == peer) return true;
    int can = 0;
    SYNCMEM_CUDA_TRY(cudaDeviceCanAccessPeer(&can, index, peer));
    return can != 0;
  }

  void enable_peer_access(int index, int peer) override {
    if (index == peer) return;
    std::lock_guard lock{peer_mutex_};
    const cudaError_t status = cudaDeviceEnablePeerAccess(peer, 0);
    if (status == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
      return;
    }
    (void)index;
    SYNCMEM_CUDA_TRY(status);
  }

  // ---- capabilities --------------------------------------------------------------
  pool_capability* pools() noexcept override { return &pools_; }
  vmm_capability* virtual_memory() noexcept override { return &vmm_; }
  graph_capability* graphs() noexcept override { return &graphs_; }
  ipc_capability* ipc() noexcept override { return &ipc_; }

 private:
  // A yes-or-no property of each device, asked of the runtime once.
  class per_device_answer {
   public:
    template <class Ask>
    bool get(int index, Ask ask) {
      if (index < 0 || static_cast<std::size_t>(index) >= known_.size()) return false;
      auto& known = known_[static_cast<std::size_t>(index)];
      int answer = known.load(std::memory_order_relaxed);
      if (answer == 0) {
        answer = ask(index) ? yes : no;
        known.store(answer, std::memory_order_relaxed);
      }
      return answer == yes;
    }

   private:
    static constexpr int no = 1;
    static constexpr int yes = 2;
    std::array<std::atomic<int>, 64> known_{};  // 0: not asked yet
  };

  static int attribute(cudaDeviceAttr what, int index) {
    int value = 0;
    SYNCMEM_CUDA_TRY(cudaDeviceGetAttribute(&value, what, index));
    return value;
  }

  // Whether kernels on device `index` reach pinned host memory, registered
  // memory included, by its host pointer (unified addressing).
  bool addresses_host_memory(int index) {
    return host_pointers_.get(index, [](int i) {
      return attribute(cudaDevAttrUnifiedAddressing, i) != 0 &&
             attribute(cudaDevAttrCanUseHostPointerForRegisteredMem, i) != 0;
    });
  }

  cuda_pools pools_;
  cuda_vmm vmm_;
  cuda_graphs graphs_;
  cuda_ipc ipc_{vmm_};
  std::atomic<bool> batch_supported_{true};
  per_device_answer host_pointers_;    // addresses_host_memory
  per_device_answer pageable_staged_;  // pageable_uploads_read_at_return
  std::once_flag count_once_;
  int count_ = 0;
  std::string why_;
  std::mutex peer_mutex_;
};

}  // namespace
}  // namespace cuda

backend& cuda_backend() noexcept {
  static auto* const impl = new cuda::backend_impl{};  // never destroyed: used after main() too
  return *impl;
}

bool cuda_compiled() noexcept { return true; }

int cuda_runtime_version() noexcept {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) cudaGetLastError();
  return v;
}

int cuda_driver_version() noexcept {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) cudaGetLastError();
  return v;
}

}  // namespace syncmem::detail
