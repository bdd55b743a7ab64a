#pragma once

// Emulated devices: devices made of host memory (see include/syncmem/emulated.hpp).
// The core operations are here; pools, virtual memory and graphs are the
// capability classes beside it (emulated_pools, emulated_vmm, emulated_graphs),
// which reach the devices and the allocation registry through this class.

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/emulated/emulated_graphs.hpp"
#include "backend/emulated/emulated_ipc.hpp"
#include "backend/emulated/emulated_pools.hpp"
#include "backend/emulated/emulated_vmm.hpp"
#include "backend/emulated/worker_stream.hpp"
#include "syncmem/emulated.hpp"

namespace syncmem::detail::emulated {

inline constexpr int max_devices = 64;
inline constexpr std::size_t device_alignment = 256;
inline constexpr unsigned char poison_byte = 0xFF;

// How many operations ran on an emulated device that was not their thread's
// current one (a missing device_guard), thrown or logged: the test programs
// fail when any did (tests/support/test_main.cpp).
inline std::atomic<std::uint64_t> current_device_faults{0};

[[nodiscard]] constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

// Device allocations of 64 KiB and more are whole pages in a file of their
// own, so that they can be shared with other processes (emulated_ipc);
// smaller ones are heap memory, 256-aligned.
inline constexpr std::size_t page_aligned_from = std::size_t{64} << 10;
[[nodiscard]] constexpr std::size_t device_alignment_for(std::size_t size) {
  return size >= page_aligned_from ? 4096 : device_alignment;
}

struct allocation {
  std::size_t size;
  memory_kind kind;
  int device;  // -1 for host memory
};

struct device_state {
  int index;
  std::size_t capacity;
  std::atomic<std::size_t> used{0};
  std::mutex streams_mutex;
  // Shared: a device-wide synchronize keeps each stream alive while it waits
  // on it, even if its owner destroys it meanwhile on another thread.
  std::unordered_map<worker_stream*, std::shared_ptr<worker_stream>> streams;
  std::once_flag default_stream_once;
  // Never destroyed; atomic, as any stream's use compares itself with it.
  std::atomic<worker_stream*> default_stream{nullptr};
  std::once_flag peers_once;
};

class emulated_backend final : public backend {
 public:
  emulated_backend();

  void configure(const emulated_options& options);
  emulated_options options();
  void set_delay(std::chrono::microseconds d);
  void set_poison(bool on) { poison_.store(on); }

  // ---- devices -------------------------------------------------------------
  device_kind kind() const noexcept override { return device_kind::emulated; }
  const backend_traits& traits() const noexcept override;
  int device_count() noexcept override { return count_.load(std::memory_order_acquire); }
  std::string why_no_devices() override;
  device_properties properties(int index) override;
  memory_info memory(int index) override;
  void synchronize_device(int index) override;
  // Each thread has a current emulated device, as CUDA's runtime has a
  // current GPU; operations that CUDA runs on the current device check it.
  void make_current(int index) override;
  int current_index() override;

  // ---- memory ----------------------------------------------------------------
  void* allocate(int index, std::size_t bytes) override;
  void deallocate(int index, void* p, std::size_t) noexcept override;
  void* allocate_pinned(std::size_t bytes, unsigned) override;
  void deallocate_pinned(void* p, std::size_t) noexcept override;
  void register_host(void* p, std::size_t bytes, unsigned) override;
  void unregister_host(void* p) noexcept override;

  // ---- streams ---------------------------------------------------------------
  stream_handle create_stream(int index, bool, int) override;
  void destroy_stream(int index, stream_handle handle) noexcept override;
  stream_handle default_stream(int index) override;
  void synchronize_stream(int index, stream_handle s) override;
  bool stream_ready(int index, stream_handle s) override;
  void launch_host_func(int index, stream_handle s, host_func fn, void* user_data) override;
  void memcpy_async(void* dst, const void* src, std::size_t bytes, int index, stream_handle s) override;
  void memset_async(void* dst, int value, std::size_t bytes, int index, stream_handle s) override;

  // ---- events ----------------------------------------------------------------
  event_handle create_event(int index, bool timing, bool) override;
  void destroy_event(int, event_handle e) noexcept override;
  void record_event(int index, event_handle e, stream_handle s) override;
  bool event_ready(int, event_handle e) override;
  void synchronize_event(int, event_handle e) override;
  void stream_wait_event(int index, stream_handle s, event_handle e) override;
  float elapsed_ms(int, event_handle start, event_handle end) override;

  // ---- pointers and peers --------------------------------------------------
  std::optional<pointer_attributes> pointer_info(const void* p) override;
  bool can_access_peer(int index, int peer) override;
  void enable_peer_access(int index, int peer) override;

  // ---- capabilities ----------------------------------------------------------
  pool_capability* pools() noexcept override { return &pools_; }
  vmm_capability* virtual_memory() noexcept override { return &vmm_; }
  graph_capability* graphs() noexcept override { return &graphs_; }
  ipc_capability* ipc() noexcept override { return &ipc_; }
  [[nodiscard]] emulated_vmm& vmm() noexcept { return vmm_; }

  // ---- for the capability classes --------------------------------------------
  device_state& device(int index);
  worker_stream& to_stream(stream_handle s, int index);
  // What emulated devices cannot record into a graph yet: refused, the
  // capture left valid.
  static void refuse_to_record(worker_stream& w, const char* operation);
  // Takes `size` bytes of the device's capacity; false when it has no room.
  static bool reserve_capacity(device_state& d, std::size_t size);
  void add_allocation(void* p, allocation a);
  // The allocation holding p (its start and record), if any.
  [[nodiscard]] std::optional<std::pair<std::uintptr_t, allocation>> allocation_containing(const void* p);
  std::optional<allocation> remove_allocation(void* p) noexcept;
  // Frees device memory of `allocate` without waiting for the device.
  void free_now(int index, void* p) noexcept;
  // synchronize_device for the backend's own waits (before a free, an unmap,
  // an unpin), which need no current device.
  void wait_for_device(int index);
  // Waits for every stream of the device without taking their failures,
  // which their own synchronize reports.
  void wait_device_idle(int index);
  [[nodiscard]] bool poison() const noexcept { return poison_.load(); }
  // Refuses `operation` on device `index` unless it is this thread's current
  // device: on a GPU the call would act on the current device instead, so a
  // missing device_guard fails here on a machine without one too.
  static void require_current(int index, const char* operation);
  // The same for a noexcept path: logs the fault and counts it (see
  // current_device_faults in src/backend/emulated/emulated_backend.cpp).
  static void expect_current(int index, const char* operation) noexcept;
  // What CUDA forbids device-wide while a stream of the device is being
  // captured (cudaDeviceSynchronize, cudaFree, cudaGraphExecDestroy):
  // refused, and the captures are invalidated.
  void refuse_in_any_capture(int index, const char* operation);

 private:
  // Calls `f` on every stream of the device, the default stream last, outside the lock.
  template <class F>
  void for_each_stream(int index, F f) {
    auto& d = device(index);
    std::vector<std::shared_ptr<worker_stream>> streams;
    worker_stream* default_stream = nullptr;
    {
      std::lock_guard lock{d.streams_mutex};
      for (const auto& entry : d.streams) streams.push_back(entry.second);
      default_stream = d.default_stream.load(std::memory_order_acquire);  // never destroyed
    }
    for (const auto& s : streams) f(*s);
    if (default_stream != nullptr) f(*default_stream);
  }

  // What CUDA forbids on a capturing stream: refused, and the capture is
  // invalidated, as cudaErrorStreamCaptureUnsupported does.
  static void refuse_in_capture(worker_stream& w, const char* operation);
  // The allocation containing p, under registry_mutex_.
  const std::pair<const std::uintptr_t, allocation>* find(const void* p) const;
  // A range that starts in a known allocation must end inside it.
  void check_range(const void* p, std::size_t bytes, const char* which);
  void synchronize_all_noexcept() noexcept;

  std::mutex config_mutex_;
  std::atomic<int> count_{0};
  std::size_t memory_per_device_ = std::size_t{2} << 30;
  std::atomic<std::int64_t> max_delay_us_{0};
  std::atomic<bool> poison_{true};
  std::string env_problem_;
  std::array<std::atomic<device_state*>, max_devices> devices_{};

  std::shared_mutex registry_mutex_;
  std::map<std::uintptr_t, allocation> allocations_;
  std::atomic<std::size_t> allocation_count_{0};

  emulated_pools pools_{*this};
  emulated_vmm vmm_{*this};
  emulated_graphs graphs_{*this};
  emulated_ipc ipc_{*this};
};

// The one instance, made on first use and never destroyed (objects may outlive main()).
[[nodiscard]] emulated_backend& instance();

}  // namespace syncmem::detail::emulated
