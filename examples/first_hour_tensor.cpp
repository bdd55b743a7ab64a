// The first hour of a new user, with synced_memory and tensor: make a tensor,
// fill it on the host, work on it on a device stream with the portable
// element-wise kernels, read it back, and look at the caching allocator that
// served it. No casts: typed spans and elements throughout.
//
//   first_hour_tensor
//
// Runs on the first CUDA device, or on an emulated device when there is none
// (SYNCMEM_EMULATED_DEVICES=1).

#include <cstdint>
#include <iostream>
#include <span>

#include "syncmem/elementwise.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/syncmem.hpp"
#include "syncmem/tensor.hpp"

int main() try {
  if (syncmem::device_count() == 0) {
    std::cerr << "first_hour_tensor: no device; set SYNCMEM_EMULATED_DEVICES=1 to run without a GPU\n";
    return 2;
  }
  const syncmem::device_id device = syncmem::current_device();
  syncmem::stream s{device};

  // A tensor, filled on the host through a typed span, and one element by index.
  syncmem::tensor x{syncmem::dtype::float32, {64, 100}, device, {.label = "x"}};
  float value = -50.0F;
  for (float& v : x.mutable_host_span<float>()) {
    v = value;
    value = value < 50.0F ? value + 1.0F : -50.0F;
  }
  x.mutable_at<float>({63, 99}) = 1000.0F;

  // Device work on a stream: y = 1 everywhere, then y += 2 x. The tensors move
  // their contents to the device by themselves, in order on s.
  syncmem::tensor y{syncmem::dtype::float32, {64, 100}, device, {.label = "y"}};
  y.fill(1, s);  // an int, converted to float as PyTorch's fill_ does
  syncmem::axpy(2.0F, x.device_span<float>(s), y.mutable_device_span<float>(s), s);
  const std::uint64_t on_device = syncmem::checksum(y.device_span<float>(s), s);

  // Read back on the host: the tensor waits for the stream and copies once.
  const std::span<const float> xs = x.host_span<float>();
  const std::span<const float> ys = y.host_span<float>();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < y.numel(); ++i) {
    if (ys[i] != 1.0F + 2.0F * xs[i]) ++wrong;
  }
  const bool same_checksum = syncmem::host_checksum(ys) == on_device;
  const bool corner = y.at<float>({63, 99}) == 2001.0F;
  std::cout << y.to_string() << ": " << wrong << " of " << y.numel()
            << " elements wrong, y[63, 99] = " << y.at<float>({63, 99}) << "; checksums "
            << (same_checksum ? "agree" : "differ") << "\n";

  // The caching allocator behind both tensors, typed: no cast for its statistics.
  syncmem::mr::caching_resource& pool = syncmem::mr::default_resource(device);
  void* scratch = pool.allocate(1 << 20, s);  // raw bytes straight from the pool, in order on s
  const syncmem::mr::caching_statistics stats = pool.statistics();
  pool.deallocate(scratch, 1 << 20, s);
  std::cout << pool.name() << ": " << stats.live_allocations << " live allocations, " << stats.reserved_bytes
            << " bytes reserved, " << stats.cache_hits << " cache hits\n";
  return wrong == 0 && same_checksum && corner && stats.live_allocations >= 3 ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "first_hour_tensor: " << e.what() << "\n";
  return 1;
}
