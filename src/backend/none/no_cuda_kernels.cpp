// The CUDA kernels of a build without CUDA: there are no CUDA devices, so
// nothing reaches them; they refuse with syncmem::unsupported_error anyway.

#include "backend/kernels.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail {
namespace {

[[noreturn]] void refuse() {
  SYNCMEM_UNSUPPORTED("CUDA kernels are not available: this build of syncmem has no CUDA backend");
}

class no_cuda_kernels final : public device_kernels {
 public:
  void fill(stream_view, void*, std::size_t, std::size_t, std::uint64_t) override { refuse(); }
  void scale(stream_view, dtype, void*, std::size_t, double) override { refuse(); }
  void axpy(stream_view, dtype, std::size_t, double, const void*, void*) override { refuse(); }
  void iota(stream_view, dtype, void*, std::size_t, std::int64_t) override { refuse(); }
  void checksum(stream_view, const void*, std::size_t, void*) override { refuse(); }
  std::size_t reduce_scratch_bytes(std::size_t) override { refuse(); }
  void reduce(stream_view, dtype, reduction, const void*, std::size_t, void*) override { refuse(); }
};

}  // namespace

device_kernels& cuda_kernels() noexcept {
  static auto* const impl = new no_cuda_kernels{};  // never destroyed: tensors may outlive main()
  return *impl;
}

}  // namespace syncmem::detail
