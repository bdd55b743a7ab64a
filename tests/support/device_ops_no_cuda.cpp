// Without CUDA there are no CUDA devices, so these are never reached.

#include "device_ops.hpp"
#include "syncmem/error.hpp"

namespace syncmem::test::cuda_ops {

void fill_pattern(stream_view, void*, std::size_t, std::uint64_t) { SYNCMEM_UNSUPPORTED("no CUDA in this build"); }
void add_bytes(stream_view, void*, std::size_t, std::uint8_t) { SYNCMEM_UNSUPPORTED("no CUDA in this build"); }
void sleep(stream_view, std::chrono::microseconds) { SYNCMEM_UNSUPPORTED("no CUDA in this build"); }
void capture_and_launch(stream_view, const std::function<void()>&, const std::function<void()>&) {
  SYNCMEM_UNSUPPORTED("no CUDA in this build");
}
int exchange_capture_mode(int) { SYNCMEM_UNSUPPORTED("no CUDA in this build"); }

}  // namespace syncmem::test::cuda_ops
