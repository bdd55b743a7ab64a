#pragma once

/// @file compat/tensorrt_pro.hpp
/// @brief tensorRT_Pro's `MixMemory` and `AutoDevice` on syncmem.
///
/// Port by changing the include and the namespace (`syncmem::compat::trt`).
/// Integer device ids count devices of the compat kind: CUDA devices, or
/// emulated ones when there is no CUDA device (see compat/device.hpp).
///
/// Differences from the original, each a fix:
/// - Growing a side that references external memory (`reference_data`) now
///   allocates memory the object owns and frees later; the original kept
///   `owner_*` false and leaked the new allocation.
/// - Memory comes from syncmem's resources (the device's caching allocator,
///   the library's pinned host resource) instead of cudaMalloc/cudaMallocHost
///   on every growth, and failures throw syncmem's errors (out_of_memory with
///   sizes and device) instead of printing and carrying on with a null pointer.
/// - The object is move-only: the original could be copied, and both copies
///   freed the same memory.
/// - Sizes are checked for overflow in the typed accessors.

#include <cstddef>

#include "syncmem/compat/device.hpp"
#include "syncmem/device_guard.hpp"

namespace syncmem::compat::trt {

/// @brief The original's "use the current device" marker.
inline constexpr int CURRENT_DEVICE_ID = -1;  // NOLINT(readability-identifier-naming)

/// @brief Switches the current device for a scope and restores it.
class AutoDevice {
 public:
  explicit AutoDevice(int device_id = 0) : guard_{compat::to_device(device_id)} {}

 private:
  device_guard guard_;
};

/// @brief A host buffer and a device buffer of one device, each grown on
/// demand (grow-only) and zero-filled when (re)allocated. The two sides are
/// independent, as in the original: copy between them yourself (or use
/// syncmem::synced_memory, which does it for you).
class MixMemory {
 public:
  explicit MixMemory(int device_id = CURRENT_DEVICE_ID);
  MixMemory(void* cpu, size_t cpu_size, void* gpu, size_t gpu_size, int device_id = CURRENT_DEVICE_ID);
  virtual ~MixMemory();
  MixMemory(const MixMemory&) = delete;
  MixMemory& operator=(const MixMemory&) = delete;
  MixMemory(MixMemory&& other) noexcept;
  MixMemory& operator=(MixMemory&& other) noexcept;

  /// @brief Device memory of at least `size` bytes (reallocated only to grow).
  void* gpu(size_t size);
  /// @brief Pinned host memory of at least `size` bytes (reallocated only to grow).
  void* cpu(size_t size);
  template <typename T>
  T* gpu(size_t count) {
    return static_cast<T*>(gpu(bytes_of(count, sizeof(T))));
  }
  template <typename T>
  T* cpu(size_t count) {
    return static_cast<T*>(cpu(bytes_of(count, sizeof(T))));
  }

  void release_gpu();
  void release_cpu();
  void release_all();

  /// @brief Whether this object allocated (and will free) each side.
  [[nodiscard]] bool owner_gpu() const { return owner_gpu_; }
  [[nodiscard]] bool owner_cpu() const { return owner_cpu_; }
  [[nodiscard]] size_t cpu_size() const { return cpu_size_; }
  [[nodiscard]] size_t gpu_size() const { return gpu_size_; }
  [[nodiscard]] int device_id() const { return device_id_; }

  [[nodiscard]] void* gpu() const { return gpu_; }
  [[nodiscard]] void* cpu() const { return cpu_; }
  template <typename T>
  [[nodiscard]] T* gpu() const {
    return static_cast<T*>(gpu_);
  }
  template <typename T>
  [[nodiscard]] T* cpu() const {
    return static_cast<T*>(cpu_);
  }

  /// @brief Uses external memory for either side (null or size 0: that side is
  /// empty); this object will not free it.
  void reference_data(void* cpu, size_t cpu_size, void* gpu, size_t gpu_size, int device_id = CURRENT_DEVICE_ID);

 private:
  [[nodiscard]] static size_t bytes_of(size_t count, size_t element);

  void* cpu_ = nullptr;
  size_t cpu_size_ = 0;
  bool owner_cpu_ = true;
  int device_id_ = 0;
  void* gpu_ = nullptr;
  size_t gpu_size_ = 0;
  bool owner_gpu_ = true;
};

}  // namespace syncmem::compat::trt
