#pragma once

// What every test shares: the device kinds typed suites run over, a random
// source seeded afresh each run (the seed is printed, and SYNCMEM_TEST_SEED
// replays it), and scoped changes to the emulated devices.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "syncmem/device.hpp"
#include "syncmem/emulated.hpp"
#include "syncmem/error.hpp"

namespace syncmem::test {

// Emulated devices the test main enables (unless the environment says otherwise).
inline constexpr int emulated_test_devices = 3;

struct emulated_kind {
  static constexpr device_kind value = device_kind::emulated;
};
struct cuda_kind {
  static constexpr device_kind value = device_kind::cuda;
};
using device_kinds = ::testing::Types<emulated_kind, cuda_kind>;

struct device_kind_names {
  template <class T>
  static std::string GetName(int) {
    return T::value == device_kind::cuda ? "cuda" : "emulated";
  }
};

// Whether a missing CUDA device must fail instead of skip (the GPU check sets
// SYNCMEM_REQUIRE_CUDA=1, so that no CUDA test is skipped silently there).
[[nodiscard]] bool cuda_required();

// The run's random engine and seed.
[[nodiscard]] std::mt19937_64& rng();
[[nodiscard]] std::uint64_t run_seed();
[[nodiscard]] std::uint64_t fresh_seed();
[[nodiscard]] std::vector<std::uint8_t> random_bytes(std::size_t n);

// The message of the syncmem::logic_error that `action` throws, or "no error".
std::string error_of(auto&& action) {
  try {
    (void)action();
  } catch (const logic_error& e) {
    return e.what();
  }
  return "no error";
}

// What run_threads saw: how many threads threw, and the first one's message.
struct thread_failures {
  int count = 0;
  std::string first;
};

// Runs body(t) for t in [0, threads) on as many threads at once and joins
// them; an exception ends only its own thread and is counted.
thread_failures run_threads(int threads, const std::function<void(int)>& body);

// Sets the emulated delay for a scope.
class scoped_emulated_delay {
 public:
  explicit scoped_emulated_delay(std::chrono::microseconds delay);
  ~scoped_emulated_delay();
  scoped_emulated_delay(const scoped_emulated_delay&) = delete;
  scoped_emulated_delay& operator=(const scoped_emulated_delay&) = delete;

 private:
  std::chrono::microseconds previous_;
};

// A fixture for typed suites over device kinds: skips (visibly) when the
// machine has fewer than `needed` devices of the kind, or fails when
// SYNCMEM_REQUIRE_CUDA demands CUDA devices.
template <class Kind>
class device_test : public ::testing::Test {
 protected:
  static constexpr device_kind kind = Kind::value;

  void SetUp() override { require(1); }

  // Skips (or fails) the test unless `needed` devices of the kind exist. In a
  // test body use SYNCMEM_REQUIRE_COUNT(n), which also returns from the body.

  [[nodiscard]] static device_id dev(int index = 0) { return device_id{kind, index}; }
  [[nodiscard]] static int count() { return device_count(kind); }
  [[nodiscard]] static bool is_cuda() { return kind == device_kind::cuda; }

  void require(int needed) {
    const int have = device_count(kind);
    if (have >= needed) return;
    if (kind == device_kind::cuda && cuda_required() && have == 0) {
      FAIL() << "SYNCMEM_REQUIRE_CUDA is set but there is no CUDA device: " << why_no_devices(kind);
    }
    GTEST_SKIP() << "needs " << needed << " " << (kind == device_kind::cuda ? "CUDA" : "emulated")
                 << " device(s), this machine has " << have
                 << (have == 0 ? " (" + why_no_devices(kind) + ")" : std::string{});
  }
};

}  // namespace syncmem::test

// In a typed device_test body: skips the test (returning from it) unless `n`
// devices of the suite's kind exist.
#define SYNCMEM_REQUIRE_COUNT(n)                                                    \
  do {                                                                              \
    this->require(n);                                                               \
    if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return; \
  } while (false)

// In a test body: skips unless `n` devices of `kind` exist.
#define SYNCMEM_REQUIRE_DEVICES(kind, n)                                                      \
  do {                                                                                        \
    if (::syncmem::device_count(kind) < (n)) {                                                \
      if ((kind) == ::syncmem::device_kind::cuda && ::syncmem::test::cuda_required() &&       \
          ::syncmem::device_count(kind) == 0) {                                               \
        FAIL() << "SYNCMEM_REQUIRE_CUDA is set but there is no CUDA device";                  \
      }                                                                                       \
      GTEST_SKIP() << "needs " << (n) << " device(s) of kind " << ::syncmem::to_string(kind); \
    }                                                                                         \
  } while (false)
