#include "syncmem/compat/tensorrt_pro.hpp"

#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/ignored_failure.hpp"
#include "mr/default_host_resource.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::compat::trt {

namespace {
int checked_id(int device_id) { return compat::to_device(device_id).index(); }
device_id as_device(int index) { return device_id{compat::kind(), index}; }
}  // namespace

size_t MixMemory::bytes_of(size_t count, size_t element) {
  SYNCMEM_EXPECTS(count <= std::numeric_limits<size_t>::max() / element,
                  fmt::format("MixMemory: {} elements of {} bytes overflow size_t", count, element));
  return count * element;
}

MixMemory::MixMemory(int device_id) : device_id_{checked_id(device_id)} {}

MixMemory::MixMemory(void* cpu, size_t cpu_size, void* gpu, size_t gpu_size, int device_id) {
  reference_data(cpu, cpu_size, gpu, gpu_size, device_id);
}

MixMemory::~MixMemory() {
  try {
    release_all();
  } catch (...) {
    syncmem::detail::log_ignored("releasing a MixMemory's buffers in its destructor",
                                 spdlog::level::warn);  // a destructor must not throw
  }
}

MixMemory::MixMemory(MixMemory&& other) noexcept
    : cpu_{std::exchange(other.cpu_, nullptr)},
      cpu_size_{std::exchange(other.cpu_size_, 0)},
      owner_cpu_{std::exchange(other.owner_cpu_, true)},
      device_id_{other.device_id_},
      gpu_{std::exchange(other.gpu_, nullptr)},
      gpu_size_{std::exchange(other.gpu_size_, 0)},
      owner_gpu_{std::exchange(other.owner_gpu_, true)} {}

MixMemory& MixMemory::operator=(MixMemory&& other) noexcept {
  if (this != &other) {
    try {
      release_all();
    } catch (...) {
      syncmem::detail::log_ignored("releasing a MixMemory's buffers before a move", spdlog::level::warn);
    }
    cpu_ = std::exchange(other.cpu_, nullptr);
    cpu_size_ = std::exchange(other.cpu_size_, 0);
    owner_cpu_ = std::exchange(other.owner_cpu_, true);
    device_id_ = other.device_id_;
    gpu_ = std::exchange(other.gpu_, nullptr);
    gpu_size_ = std::exchange(other.gpu_size_, 0);
    owner_gpu_ = std::exchange(other.owner_gpu_, true);
  }
  return *this;
}

void* MixMemory::gpu(size_t size) {
  if (gpu_size_ >= size) return gpu_;
  const auto device = as_device(device_id_);
  device_guard guard{device};
  auto s = default_stream(device);
  void* fresh = mr::get_per_device_resource(device).allocate(size, s);
  syncmem::detail::backend_for(device).memset_async(fresh, 0, size, device.index(), s.handle());
  s.synchronize();  // like cudaMemset: zeros before the caller touches it
  release_gpu();
  gpu_ = fresh;
  gpu_size_ = size;
  owner_gpu_ = true;  // the original left this false after reference_data, and leaked
  return gpu_;
}

void* MixMemory::cpu(size_t size) {
  if (cpu_size_ >= size) return cpu_;
  const auto device = as_device(device_id_);
  auto& resource = mr::detail::default_host_resource(memory_kind::pinned_host, device.kind());
  void* fresh = resource.allocate(size, default_stream(device));
  std::memset(fresh, 0, size);
  release_cpu();
  cpu_ = fresh;
  cpu_size_ = size;
  owner_cpu_ = true;
  return cpu_;
}

void MixMemory::release_cpu() {
  if (cpu_ != nullptr && owner_cpu_) {
    const auto device = as_device(device_id_);
    mr::detail::default_host_resource(memory_kind::pinned_host, device.kind())
        .deallocate(cpu_, cpu_size_, default_stream(device));
  }
  cpu_ = nullptr;
  cpu_size_ = 0;
  owner_cpu_ = true;
}

void MixMemory::release_gpu() {
  if (gpu_ != nullptr && owner_gpu_) {
    const auto device = as_device(device_id_);
    device_guard guard{device};
    mr::get_per_device_resource(device).deallocate(gpu_, gpu_size_, default_stream(device));
  }
  gpu_ = nullptr;
  gpu_size_ = 0;
  owner_gpu_ = true;
}

void MixMemory::release_all() {
  release_cpu();
  release_gpu();
}

void MixMemory::reference_data(void* cpu, size_t cpu_size, void* gpu, size_t gpu_size, int device_id) {
  const int id = checked_id(device_id);  // validate before letting go of anything
  release_all();
  if (cpu == nullptr || cpu_size == 0) {
    cpu = nullptr;
    cpu_size = 0;
  }
  if (gpu == nullptr || gpu_size == 0) {
    gpu = nullptr;
    gpu_size = 0;
  }
  cpu_ = cpu;
  cpu_size_ = cpu_size;
  gpu_ = gpu;
  gpu_size_ = gpu_size;
  owner_cpu_ = cpu == nullptr;
  owner_gpu_ = gpu == nullptr;
  device_id_ = id;
}

}  // namespace syncmem::compat::trt
