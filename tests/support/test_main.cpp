// The main of every test program: enables emulated devices (several, so that
// device affinity is exercised) unless SYNCMEM_EMULATED_DEVICES is set, which
// must then give as many; prints the run's random seed, and fails the program
// when a test ran an operation on an emulated device that was not its
// thread's current one (a missing device_guard, which on a GPU acts on the
// wrong device).

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/emulated/emulated_backend.hpp"
#include "syncmem/device.hpp"
#include "syncmem/emulated.hpp"
#include "test_support.hpp"

namespace {

class current_device_check final : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo&) override { before_ = faults(); }
  void OnTestEnd(const ::testing::TestInfo& test) override {
    const auto n = faults() - before_;
    if (n == 0) return;
    std::fprintf(stderr,
                 "syncmem tests: %s.%s ran %llu operation(s) on an emulated device that was not the thread's "
                 "current one (a missing device_guard; see the errors above)\n",
                 test.test_suite_name(), test.name(), static_cast<unsigned long long>(n));
    failed = true;
  }
  static inline bool failed = false;

 private:
  static std::uint64_t faults() { return syncmem::detail::emulated::current_device_faults.load(); }
  std::uint64_t before_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  // Kernels loaded lazily are loaded at their first launch, which waits for
  // the device: a first launch behind a stream held on a host latch would
  // wait for the latch that only the test, blocked in the launch, releases.
  if (std::getenv("CUDA_MODULE_LOADING") == nullptr) setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* set = std::getenv("SYNCMEM_EMULATED_DEVICES"); set == nullptr) {
    syncmem::emulated_options options = syncmem::emulated_device_options();
    options.device_count = syncmem::test::emulated_test_devices;
    options.memory_per_device = std::size_t{512} << 20;
    syncmem::enable_emulated_devices(options);
  } else if (const int have = syncmem::device_count(syncmem::device_kind::emulated);
             have != syncmem::test::emulated_test_devices) {
    // Tests take the emulated devices as given (their count, the indices they
    // use), and would fail one by one, some in std::terminate on a thread.
    std::fprintf(stderr,
                 "syncmem tests: SYNCMEM_EMULATED_DEVICES='%s' gives %d emulated device(s); the tests use %d. "
                 "Unset it (the tests then enable %d) or set it to %d.\n",
                 set, have, syncmem::test::emulated_test_devices, syncmem::test::emulated_test_devices,
                 syncmem::test::emulated_test_devices);
    return 1;
  }
  std::printf("syncmem tests: seed %llu (replay with SYNCMEM_TEST_SEED), %d CUDA and %d emulated devices\n",
              static_cast<unsigned long long>(syncmem::test::run_seed()),
              syncmem::device_count(syncmem::device_kind::cuda), syncmem::device_count(syncmem::device_kind::emulated));
  if (syncmem::device_count(syncmem::device_kind::cuda) == 0) {
    std::printf("syncmem tests: CUDA tests will be skipped: %s\n",
                syncmem::why_no_devices(syncmem::device_kind::cuda).c_str());
  }
  ::testing::UnitTest::GetInstance()->listeners().Append(new current_device_check);
  const int status = RUN_ALL_TESTS();
  return current_device_check::failed ? 1 : status;
}
