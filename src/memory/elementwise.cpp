#include "syncmem/elementwise.hpp"

#include <fmt/format.h>

#include "backend/host_math.hpp"
#include "backend/kernels.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"

namespace syncmem::detail {
namespace {

// A kernel on host memory would crash a GPU; refuse it with what is known.
void check_device_memory(const char* function, const char* which, const void* p, std::size_t bytes, stream_view s) {
  if (bytes == 0) return;
  const pointer_attributes a = get_pointer_attributes(p);
  SYNCMEM_EXPECTS(
      a.kind == memory_kind::device && a.device == s.device(),
      fmt::format("{}: {} ({} bytes at {}) is {} memory{}; it must be device memory of {}, the stream's "
                  "device",
                  function, which, bytes, p, to_string(a.kind),
                  a.device ? fmt::format(" of {}", to_string(*a.device)) : std::string{}, to_string(s.device())));
}

}  // namespace

void elementwise_fill(stream_view s, void* p, std::size_t n, std::size_t itemsize, std::uint64_t bits) {
  check_device_memory("fill", "x", p, n * itemsize, s);  // a span's size_bytes() does not overflow
  if (n == 0) return;
  device_guard guard{s.device()};
  kernels_for(s.device().kind()).fill(s, p, n, itemsize, bits);
}

void elementwise_iota(stream_view s, dtype type, void* p, std::size_t n, std::int64_t start) {
  check_device_memory("iota", "x", p, n * size_of(type), s);
  if (n == 0) return;
  device_guard guard{s.device()};
  kernels_for(s.device().kind()).iota(s, type, p, n, start);
}

void elementwise_axpy(stream_view s, dtype type, double alpha, const void* x, std::size_t nx, void* y, std::size_t ny) {
  SYNCMEM_EXPECTS(nx == ny, fmt::format("axpy: x has {} elements and y has {}; they must have as many", nx, ny));
  check_device_memory("axpy", "x", x, nx * size_of(type), s);
  check_device_memory("axpy", "y", y, ny * size_of(type), s);
  if (nx == 0) return;
  device_guard guard{s.device()};
  kernels_for(s.device().kind()).axpy(s, type, nx, alpha, x, y);
}

std::uint64_t elementwise_checksum(stream_view s, const void* p, std::size_t bytes) {
  check_device_memory("checksum", "x", p, bytes, s);
  if (bytes == 0) return 0;
  device_guard guard{s.device()};
  auto& resource = mr::get_per_device_resource(s.device());
  void* scratch = resource.allocate(sizeof(std::uint64_t), s);
  std::uint64_t result = 0;
  try {
    kernels_for(s.device().kind()).checksum(s, p, bytes, scratch);
    copy(&result, scratch, sizeof result, s);  // complete on return
  } catch (...) {
    resource.deallocate(scratch, sizeof(std::uint64_t), s);
    throw;
  }
  resource.deallocate(scratch, sizeof(std::uint64_t), s);
  return result;
}

}  // namespace syncmem::detail

namespace syncmem {

std::uint64_t host_checksum(const void* p, std::size_t bytes) noexcept { return detail::host_math::checksum(p, bytes); }

}  // namespace syncmem
