#pragma once

// The few operations a device offers, implemented once for the CUDA runtime
// (src/backend/cuda) and once for emulated devices (src/backend/emulated). Everything above
// this layer reaches devices only through this interface, so that every device
// code path runs on machines without a GPU too.
//
// Callers hold a device_guard for the device when they call; the CUDA backend
// relies on the current device being right, the emulated one takes the index.
//
// The interface is a core every backend implements and capabilities it may
// offer (as c10's DeviceGuardImplInterface and RMM's resources leave optional
// operations out rather than stub them): pools(), virtual_memory() and
// graphs() return nullptr where the backend has none, and callers test the
// pointer. Adding a backend, as a checklist:
//   1. Required: derive from `backend` and implement every pure virtual below
//      (devices, device memory, pinned and registered host memory, streams,
//      copies, events, pointer_info, peer access, kind() and traits()), and
//      detail::device_kernels (backend/kernels.hpp) for its kernels. Its
//      streams, events, pools and graphs travel as opaque handles
//      (stream_handle, event_handle, backend/handles.hpp) that it converts to
//      its own objects and back (handle_of, pointer_of).
//   2. Optional: implement pool_capability, vmm_capability,
//      graph_capability or ipc_capability (one class and source each, as src/backend/emulated
//      does) and return it from the accessor; the batched copies, the copy
//      kernel and pageable_uploads_read_at_return decline by default.
//   3. Register it: a `device_kind`, a slot in backend_for (backend.cpp) and in
//      every per_kind table (backend/per_kind.hpp, kernels_for), and the
//      other places docs/architecture.md lists under "Adding a backend".

#include <array>
#include <atomic>
#include <cstddef>
#include <optional>
#include <string>

#include "backend/graph_capability.hpp"
#include "backend/handles.hpp"
#include "backend/ipc_capability.hpp"
#include "backend/per_kind.hpp"
#include "backend/pool_capability.hpp"
#include "backend/vmm_capability.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/memory_kind.hpp"

namespace syncmem::detail {

// Flags with the values of cudaHostAlloc* and cudaHostRegister*.
inline constexpr unsigned host_alloc_portable = 1;
inline constexpr unsigned host_alloc_mapped = 2;
inline constexpr unsigned host_alloc_write_combined = 4;
inline constexpr unsigned host_register_portable = 1;
inline constexpr unsigned host_register_mapped = 2;
inline constexpr unsigned host_register_read_only = 8;

// What a backend's devices can and cannot do, asked by the layers above
// instead of testing the kind.
struct backend_traits {
  // The backend keeps a current device per thread of its own (the CUDA
  // runtime's); for the others device_guard records the selection itself.
  bool keeps_current_device = false;
  // pointer_info answers from syncmem's own records, cheaply and with no
  // device present: it is asked first, and always.
  bool pointer_info_is_local = false;
  // Host memory it pins is page-locked for every backend, not just recorded
  // as pinned for its own devices.
  bool pins_for_all_backends = false;
  // A wait on or query of an event binds to the record current when it is
  // made, so an event may be recorded anew before it has completed.
  bool events_reusable_before_completion = false;
  // Its streams can copy managed memory.
  bool copies_managed_memory = false;
  // memcpy_async from pageable host memory may read the source before the
  // stream reaches the copy (CUDA's driver stages it at the call).
  bool pageable_copies_may_read_early = false;
  // Device memory is host memory, which any backend's copies reach.
  bool device_memory_is_host_memory = false;
  // deallocate waits for work on the device to finish (as cudaFree does).
  bool deallocate_waits_for_device = false;
  // copy_kernel_batch may copy with a kernel (it says false otherwise).
  bool has_copy_kernel = false;
};

class backend {
 public:
  backend() = default;
  backend(const backend&) = delete;
  backend& operator=(const backend&) = delete;
  virtual ~backend() = default;

  [[nodiscard]] virtual device_kind kind() const noexcept = 0;
  [[nodiscard]] virtual const backend_traits& traits() const noexcept = 0;
  [[nodiscard]] virtual int device_count() noexcept = 0;
  [[nodiscard]] virtual std::string why_no_devices() = 0;
  [[nodiscard]] virtual device_properties properties(int index) = 0;
  [[nodiscard]] virtual memory_info memory(int index) = 0;
  virtual void synchronize_device(int index) = 0;
  // CUDA's notion of the current device; the emulated backend has none.
  virtual void make_current(int index) = 0;
  [[nodiscard]] virtual int current_index() = 0;

  // Device memory. allocate returns nullptr when the device is out of memory
  // (callers turn that into syncmem::out_of_memory with what they know) and
  // throws for any other failure.
  [[nodiscard]] virtual void* allocate(int index, std::size_t bytes) = 0;
  virtual void deallocate(int index, void* p, std::size_t bytes) noexcept = 0;
  // Pinned host memory; nullptr when pinning fails for lack of resources.
  [[nodiscard]] virtual void* allocate_pinned(std::size_t bytes, unsigned flags) = 0;
  virtual void deallocate_pinned(void* p, std::size_t bytes) noexcept = 0;
  virtual void register_host(void* p, std::size_t bytes, unsigned flags) = 0;
  virtual void unregister_host(void* p) noexcept = 0;

  // Streams. default_stream is the handle default_stream(device) uses.
  // launch_host_func refuses a capturing stream (graphs()->capture_host_func
  // records a function into a graph instead).
  [[nodiscard]] virtual stream_handle create_stream(int index, bool non_blocking, int priority) = 0;
  virtual void destroy_stream(int index, stream_handle s) noexcept = 0;
  [[nodiscard]] virtual stream_handle default_stream(int index) = 0;
  virtual void synchronize_stream(int index, stream_handle s) = 0;
  [[nodiscard]] virtual bool stream_ready(int index, stream_handle s) = 0;
  virtual void launch_host_func(int index, stream_handle s, host_func fn, void* user_data) = 0;
  virtual void memcpy_async(void* dst, const void* src, std::size_t bytes, int index, stream_handle s) = 0;
  virtual void memset_async(void* dst, int value, std::size_t bytes, int index, stream_handle s) = 0;
  // Copies `count` ranges (none empty, none overlapping another's destination)
  // in order on `s`, in one submission where the device can
  // (cudaMemcpyBatchAsync, CUDA >= 12.8, each source read in stream order);
  // returns false, having enqueued nothing, where it cannot: an older runtime
  // or driver, the legacy default stream, a stream being captured. The caller
  // then copies the ranges one by one. The base class always says false.
  [[nodiscard]] virtual bool memcpy_batch_async(void* const* dsts, const void* const* srcs, const std::size_t* sizes,
                                                std::size_t count, int index, stream_handle s);
  // Copies `count` ranges in order on `s` with a copy kernel (a launch per few
  // hundred ranges) instead of the copy engines: many small copies cost a
  // launch rather than a DMA each. Every pointer is memory the device
  // addresses directly (its own memory, pinned host memory), each size is
  // below 4 GiB, and dsts[i] and srcs[i] lie at the same offset modulo 16.
  // Returns false, having enqueued nothing, where the backend has no such
  // kernel or the device cannot address registered host memory by its host
  // pointer. The base class always says false.
  [[nodiscard]] virtual bool copy_kernel_batch(void* const* dsts, const void* const* srcs, const std::size_t* sizes,
                                               std::size_t count, int index, stream_handle s);
  // Whether `s` is being captured into a graph: graphs()->stream_capturing,
  // false where the backend cannot capture.
  [[nodiscard]] bool stream_capturing(int index, stream_handle s) {
    graph_capability* const g = graphs();
    return g != nullptr && g->stream_capturing(index, s);
  }
  // Whether memcpy_async from pageable host memory to device `index` has read
  // its source when it returns (CUDA's driver copies it into its own staging
  // at the call). False where that is not promised: the base class, whose
  // copies may read their sources later, and devices that reach pageable
  // memory through the host's page tables (ATS), where the driver may read it
  // in stream order.
  [[nodiscard]] virtual bool pageable_uploads_read_at_return(int index);

  // Events.
  [[nodiscard]] virtual event_handle create_event(int index, bool timing, bool blocking_sync) = 0;
  virtual void destroy_event(int index, event_handle e) noexcept = 0;
  virtual void record_event(int index, event_handle e, stream_handle s) = 0;
  [[nodiscard]] virtual bool event_ready(int index, event_handle e) = 0;
  virtual void synchronize_event(int index, event_handle e) = 0;
  virtual void stream_wait_event(int index, stream_handle s, event_handle e) = 0;
  [[nodiscard]] virtual float elapsed_ms(int index, event_handle start, event_handle end) = 0;

  // What this backend knows of a pointer; nullopt when it is not its memory.
  [[nodiscard]] virtual std::optional<pointer_attributes> pointer_info(const void* p) = 0;
  // Around many pointer_info calls on this thread (a batch classifying its
  // copies, see pointer_queries): what each call would set up and undo is
  // set up once. They nest. The base class has nothing to set up.
  virtual void begin_pointer_queries() {}
  virtual void end_pointer_queries() noexcept {}

  // Peer access between two devices of this backend.
  [[nodiscard]] virtual bool can_access_peer(int index, int peer) = 0;
  virtual void enable_peer_access(int index, int peer) = 0;

  // Optional capabilities: nullptr where the backend has none (the base
  // class has none). A capability that exists may still be missing on one
  // device: pools()->supported(index), virtual_memory()->granularity(index).
  [[nodiscard]] virtual pool_capability* pools() noexcept { return nullptr; }
  [[nodiscard]] virtual vmm_capability* virtual_memory() noexcept { return nullptr; }
  [[nodiscard]] virtual graph_capability* graphs() noexcept { return nullptr; }
  [[nodiscard]] virtual ipc_capability* ipc() noexcept { return nullptr; }
};

// How many captures begun by syncmem::begin_capture are open, on any device
// and thread: a cheap test for hot paths (caching_resource::allocate) before
// they ask the backend whether their stream is captured.
inline std::atomic<int> open_captures{0};
[[nodiscard]] inline bool captures_open() noexcept { return open_captures.load(std::memory_order_acquire) > 0; }
inline void capture_opened() noexcept { open_captures.fetch_add(1, std::memory_order_acq_rel); }
inline void capture_closed() noexcept { open_captures.fetch_sub(1, std::memory_order_acq_rel); }

// The backend of a kind. The CUDA one exists in every build: without CUDA it
// reports no devices and refuses everything else.
[[nodiscard]] backend& backend_for(device_kind kind) noexcept;
[[nodiscard]] inline backend& backend_for(device_id id) noexcept { return backend_for(id.kind()); }

// The backend's graphs(), or syncmem::unsupported_error naming `operation`
// where it cannot capture streams into graphs.
[[nodiscard]] graph_capability& require_graphs(backend& b, const char* operation);

// Implemented in src/backend/cuda (or src/backend/none/no_cuda_backend.cpp) and src/backend/emulated.
[[nodiscard]] backend& cuda_backend() noexcept;
[[nodiscard]] backend& emulated_backend() noexcept;

// The backend whose memory `p` is and what it knows of it; nullopt when no
// backend knows `p`. Backends with local records are asked first.
struct pointer_owner {
  device_kind kind;
  pointer_attributes attributes;
};
[[nodiscard]] std::optional<pointer_owner> find_pointer_owner(const void* p);

// Whether a backend with local records (pointer_info_is_local) knows `p`: a
// cheap test, with no driver call.
[[nodiscard]] bool known_locally(const void* p);

// Every backend's begin_pointer_queries and end_pointer_queries around a
// scope, as find_pointer_owner may ask any of them.
class pointer_queries {
 public:
  pointer_queries() {
    for (const device_kind kind : device_kinds) begin(backend_for(kind));
  }
  ~pointer_queries() {
    for (std::size_t i = count_; i > 0; --i) begun_[i - 1]->end_pointer_queries();
  }
  pointer_queries(const pointer_queries&) = delete;
  pointer_queries& operator=(const pointer_queries&) = delete;

 private:
  void begin(backend& b) {
    b.begin_pointer_queries();
    begun_[count_++] = &b;
  }
  std::array<backend*, device_kind_count> begun_{};
  std::size_t count_ = 0;
};

// The CUDA runtime's names for an error code, "" without CUDA.
[[nodiscard]] const char* cuda_error_name(int code) noexcept;
[[nodiscard]] const char* cuda_error_message(int code) noexcept;
// Clears the CUDA runtime's last (non-sticky) error; no-op without CUDA.
void cuda_clear_last_error() noexcept;
// Whether an error code means the runtime is shutting down.
[[nodiscard]] bool cuda_is_shutting_down(int code) noexcept;
// Whether the CUDA backend was compiled in, and the versions it sees (0 when none).
[[nodiscard]] bool cuda_compiled() noexcept;
[[nodiscard]] int cuda_runtime_version() noexcept;
[[nodiscard]] int cuda_driver_version() noexcept;

}  // namespace syncmem::detail
