// The first hour of a new user, with device_vector: the same task as
// first_hour_tensor.cpp (fill on the host, work on a device stream with the
// portable element-wise kernels, read back, look at the caching allocator),
// with typed device vectors that are only device memory. No casts.
//
//   first_hour_vector
//
// Runs on the first CUDA device, or on an emulated device when there is none
// (SYNCMEM_EMULATED_DEVICES=1).

#include <cstdint>
#include <iostream>
#include <span>
#include <vector>

#include "syncmem/device_vector.hpp"
#include "syncmem/elementwise.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/syncmem.hpp"

int main() try {
  if (syncmem::device_count() == 0) {
    std::cerr << "first_hour_vector: no device; set SYNCMEM_EMULATED_DEVICES=1 to run without a GPU\n";
    return 2;
  }
  const syncmem::device_id device = syncmem::current_device();
  syncmem::stream s{device};
  constexpr std::size_t n = 6400;

  // Filled on the host, then copied to the device through the transfer engine.
  std::vector<float> host(n);
  float value = -50.0F;
  for (float& v : host) {
    v = value;
    value = value < 50.0F ? value + 1.0F : -50.0F;
  }
  const syncmem::device_vector<float> x{host, s};

  // Device work on a stream: y = 1 everywhere (asked for: elements are
  // otherwise left uninitialised), then y += 2 x.
  syncmem::device_vector<float> y{n, 1.0F, s};
  syncmem::axpy(2.0F, x.span(), y.span(), s);
  const std::uint64_t on_device = syncmem::checksum(y.span(), s);

  // Read back: one element, then all of them.
  const float first = y.element(0, s);
  const std::vector<float> result = y.to_host(s);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (result[i] != 1.0F + 2.0F * host[i]) ++wrong;
  }
  const bool same_checksum = syncmem::host_checksum(std::span<const float>{result}) == on_device;
  std::cout << y.to_string() << ": y[0] = " << first << "; " << wrong << " of " << n << " elements wrong; checksums "
            << (same_checksum ? "agree" : "differ") << "\n";

  // The caching allocator behind the vectors, typed: no cast for its statistics.
  syncmem::mr::caching_resource& pool = syncmem::mr::default_resource(device);
  syncmem::device_vector<std::int64_t> counts{1000, s, &pool};  // or any other memory_resource
  syncmem::iota(counts.span(), 1, s);
  const syncmem::mr::caching_statistics stats = pool.statistics();
  const std::int64_t last = counts.element(999, s);
  std::cout << pool.name() << ": " << stats.live_allocations << " live allocations, " << stats.reserved_bytes
            << " bytes reserved; counts[999] = " << last << "\n";
  return wrong == 0 && same_checksum && first == -99.0F && stats.live_allocations >= 3 && last == 1000 ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "first_hour_vector: " << e.what() << "\n";
  return 1;
}
