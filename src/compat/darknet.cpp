#include "syncmem/compat/darknet.hpp"

#include <cstdint>
#include <limits>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "syncmem/compat/device.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"
#include "syncmem/mr/per_device_resource.hpp"

namespace syncmem::compat::darknet {
namespace {

// darknet frees with only the pointer; the allocator needs the size and device.
struct allocation {
  std::size_t bytes;
  device_id device;
};

struct registry {
  std::mutex mutex;
  std::map<std::uintptr_t, allocation> live;  // by start address
};

registry& allocations() {
  static auto* const r = new registry{};  // never destroyed: frees may come after main()
  return *r;
}

std::size_t bytes_of(std::size_t n, std::size_t element, const char* what) {
  SYNCMEM_EXPECTS(n <= std::numeric_limits<std::size_t>::max() / element,
                  fmt::format("{}: {} elements overflow size_t", what, n));
  return n * element;
}

void* make_array(const void* x, std::size_t bytes, const char* what) {
  const auto device = compat::current();
  device_guard guard{device};
  auto s = default_stream(device);
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  {
    mr::scoped_allocation_label label{what};
    p = mr::get_per_device_resource(device).allocate(bytes, s);
  }
  try {
    if (x != nullptr) {
      copy(p, x, bytes, s);
    } else {
      syncmem::detail::backend_for(device).memset_async(p, 0, bytes, device.index(), s.handle());
      s.synchronize();
    }
  } catch (...) {
    mr::get_per_device_resource(device).deallocate(p, bytes, s);
    throw;
  }
  auto& r = allocations();
  std::lock_guard lock{r.mutex};
  r.live.emplace(reinterpret_cast<std::uintptr_t>(p), allocation{bytes, device});
  return p;
}

// The allocation holding p (darknet passes offsets into arrays too), and p's
// offset in it.
std::pair<allocation, std::size_t> find(const void* p, const char* what) {
  auto& r = allocations();
  std::lock_guard lock{r.mutex};
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  auto it = r.live.upper_bound(address);
  SYNCMEM_EXPECTS(it != r.live.begin(), fmt::format("{}: {} is not in an array from cuda_make_array", what, p));
  --it;
  const std::size_t offset = address - it->first;
  SYNCMEM_EXPECTS(offset < it->second.bytes, fmt::format("{}: {} is not in an array from cuda_make_array", what, p));
  return {it->second, offset};
}

void free_array(void* p) {
  if (p == nullptr) return;
  allocation a{0, device_id::emulated(0)};
  {
    auto& r = allocations();
    std::lock_guard lock{r.mutex};
    auto it = r.live.find(reinterpret_cast<std::uintptr_t>(p));
    SYNCMEM_EXPECTS(it != r.live.end(), fmt::format("cuda_free: {} was not returned by cuda_make_array", p));
    a = it->second;
    r.live.erase(it);
  }
  device_guard guard{a.device};
  mr::get_per_device_resource(a.device).deallocate(p, a.bytes, default_stream(a.device));
}

void transfer_checked(void* dst, const void* src, const void* device_ptr, std::size_t bytes, const char* what) {
  if (bytes == 0) return;
  SYNCMEM_EXPECTS(dst != nullptr && src != nullptr, fmt::format("{}: a null pointer with n > 0", what));
  const auto [a, offset] = find(device_ptr, what);
  SYNCMEM_EXPECTS(bytes <= a.bytes - offset,
                  fmt::format("{}: {} bytes from offset {} run past the end of an array of {} bytes", what, bytes,
                              offset, a.bytes));
  device_guard guard{a.device};
  copy(dst, src, bytes, default_stream(a.device));
}

}  // namespace

float* cuda_make_array(float* x, size_t n) {
  return static_cast<float*>(make_array(x, bytes_of(n, sizeof(float), "cuda_make_array"), "cuda_make_array"));
}

int* cuda_make_int_array(int* x, size_t n) {
  return static_cast<int*>(make_array(x, bytes_of(n, sizeof(int), "cuda_make_int_array"), "cuda_make_int_array"));
}

void cuda_push_array(float* x_gpu, float* x, size_t n) {
  transfer_checked(x_gpu, x, x_gpu, bytes_of(n, sizeof(float), "cuda_push_array"), "cuda_push_array");
}

void cuda_pull_array(float* x_gpu, float* x, size_t n) {
  transfer_checked(x, x_gpu, x_gpu, bytes_of(n, sizeof(float), "cuda_pull_array"), "cuda_pull_array");
}

void cuda_free(float* x_gpu) { free_array(x_gpu); }
void cuda_free(int* x_gpu) { free_array(x_gpu); }

stream_view get_cuda_stream() { return default_stream(compat::current()); }

}  // namespace syncmem::compat::darknet
