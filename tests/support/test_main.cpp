// The main of every test program: enables emulated devices (several, so that
// device affinity is exercised) unless SYNCMEM_EMULATED_DEVICES says how many,
// and prints the run's random seed.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "syncmem/device.hpp"
#include "syncmem/emulated.hpp"
#include "test_support.hpp"

int main(int argc, char** argv) {
  // Kernels loaded lazily are loaded at their first launch, which waits for
  // the device: a first launch behind a stream held on a host latch would
  // wait for the latch that only the test, blocked in the launch, releases.
  if (std::getenv("CUDA_MODULE_LOADING") == nullptr) setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  ::testing::InitGoogleTest(&argc, argv);
  if (std::getenv("SYNCMEM_EMULATED_DEVICES") == nullptr) {
    syncmem::emulated_options options = syncmem::emulated_device_options();
    options.device_count = syncmem::test::emulated_test_devices;
    options.memory_per_device = std::size_t{512} << 20;
    syncmem::enable_emulated_devices(options);
  }
  std::printf("syncmem tests: seed %llu (replay with SYNCMEM_TEST_SEED), %d CUDA and %d emulated devices\n",
              static_cast<unsigned long long>(syncmem::test::run_seed()),
              syncmem::device_count(syncmem::device_kind::cuda), syncmem::device_count(syncmem::device_kind::emulated));
  if (syncmem::device_count(syncmem::device_kind::cuda) == 0) {
    std::printf("syncmem tests: CUDA tests will be skipped: %s\n",
                syncmem::why_no_devices(syncmem::device_kind::cuda).c_str());
  }
  return RUN_ALL_TESTS();
}
