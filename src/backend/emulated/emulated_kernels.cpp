// The kernels of emulated devices: host functions enqueued on the stream, so
// that they run in stream order on the device's worker thread, as a kernel
// would on a GPU.

#include <cstring>

#include "backend/host_math.hpp"
#include "backend/kernels.hpp"

namespace syncmem::detail {
namespace {

class emulated_kernels_impl final : public device_kernels {
 public:
  void fill(stream_view s, void* p, std::size_t count, std::size_t itemsize, std::uint64_t bits) override {
    s.launch_host_func([p, count, itemsize, bits] { host_math::fill(p, count, itemsize, bits); });
  }

  void scale(stream_view s, dtype type, void* x, std::size_t n, double alpha) override {
    s.launch_host_func([type, x, n, alpha] { host_math::scale(type, x, n, alpha); });
  }

  void axpy(stream_view s, dtype type, std::size_t n, double alpha, const void* x, void* y) override {
    s.launch_host_func([type, n, alpha, x, y] { host_math::axpy(type, n, alpha, x, y); });
  }

  void iota(stream_view s, dtype type, void* x, std::size_t n, std::int64_t start) override {
    s.launch_host_func([type, x, n, start] { host_math::iota(type, x, n, start); });
  }

  void checksum(stream_view s, const void* p, std::size_t bytes, void* scratch) override {
    s.launch_host_func([p, bytes, scratch] {
      const std::uint64_t result = host_math::checksum(p, bytes);
      std::memcpy(scratch, &result, sizeof result);
    });
  }

  std::size_t reduce_scratch_bytes(std::size_t) override { return sizeof(double); }

  void reduce(stream_view s, dtype type, reduction r, const void* x, std::size_t n, void* scratch) override {
    s.launch_host_func([type, r, x, n, scratch] {
      const double result = host_math::reduce(type, r, x, n);
      std::memcpy(scratch, &result, sizeof result);
    });
  }
};

}  // namespace

device_kernels& emulated_kernels() noexcept {
  static auto* const impl = new emulated_kernels_impl{};  // never destroyed: tensors may outlive main()
  return *impl;
}

}  // namespace syncmem::detail
