// ctest-labels: threaded
#include "syncmem/mr/cuda_async_resource.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "device_ops.hpp"
#include "resource_conformance.hpp"
#include "syncmem/mr/allocation_label.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {

struct async_emulated : on_device<device_kind::emulated> {
  static std::unique_ptr<mr::memory_resource> make() { return std::make_unique<mr::cuda_async_resource>(device()); }
};
struct async_emulated_releasing : on_device<device_kind::emulated> {
  static device_id device() { return device_id::emulated(2); }
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::cuda_async_resource>(device(), mr::cuda_async_options{.release_threshold = 0});
  }
};
struct async_cuda : on_device<device_kind::cuda> {
  static std::unique_ptr<mr::memory_resource> make() { return std::make_unique<mr::cuda_async_resource>(device()); }
};
using kinds = ::testing::Types<async_emulated, async_emulated_releasing, async_cuda>;
INSTANTIATE_TYPED_TEST_SUITE_P(cuda_async, resource_conformance, kinds);

namespace {

template <class Kind>
class cuda_async_test : public device_test<Kind> {};
TYPED_TEST_SUITE(cuda_async_test, device_kinds, device_kind_names);

TYPED_TEST(cuda_async_test, CountsWhatThePoolHolds) {
  mr::cuda_async_resource r{this->dev()};
  EXPECT_EQ(r.name(), "cuda_async_resource(" + to_string(this->dev()) + ")");
  stream s{this->dev()};
  r.reset_peaks();
  const auto before = r.statistics();
  void* a = r.allocate(1 << 20, s);
  void* b = r.allocate(3 << 20, s);
  const auto during = r.statistics();
  EXPECT_GE(during.used_bytes, before.used_bytes + (4 << 20));
  EXPECT_GE(during.reserved_bytes, during.used_bytes);
  EXPECT_GE(during.peak_used_bytes, during.used_bytes);
  r.deallocate(a, 1 << 20, s);
  r.deallocate(b, 3 << 20, s);
  s.synchronize();
  const auto after = r.statistics();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_GE(after.peak_used_bytes, before.used_bytes + (4 << 20));
  EXPECT_GE(after.reserved_bytes, 4U << 20) << "the default threshold keeps what was reserved";
  r.trim(0);
  EXPECT_EQ(r.statistics().reserved_bytes, 0U);
  r.reset_peaks();
  EXPECT_EQ(r.statistics().peak_used_bytes, 0U);
}

TYPED_TEST(cuda_async_test, FreedMemoryIsReusedOnItsStream) {
  mr::cuda_async_resource r{this->dev()};
  stream s{this->dev()};
  void* p = r.allocate(100000, s);
  const auto seed = fresh_seed();
  device_fill_pattern(s, p, 100000, seed);
  EXPECT_TRUE(holds_pattern(memory_kind::device, s, p, 100000, seed));
  r.deallocate(p, 100000, s);
  s.synchronize();
  const auto reserved = r.statistics().reserved_bytes;
  void* q = r.allocate(100000, s);
  EXPECT_EQ(r.statistics().reserved_bytes, reserved);
  r.deallocate(q, 100000, s);
}

// The issue-27 defect: with the stream held back, every free stayed queued and
// each allocation reserved a new block, until the device ran out.
TYPED_TEST(cuda_async_test, AFreeNotYetReachedIsReusedByItsOwnStream) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  mr::cuda_async_resource r{this->dev()};
  stream s{this->dev()};
  constexpr std::size_t bytes = std::size_t{64} << 20;
  r.deallocate(r.allocate(bytes, s), bytes, s);
  s.synchronize();
  const auto reserved = r.statistics().reserved_bytes;
  stream_latch hold{s};  // the stream reaches no free until the latch is released
  const auto device_memory = get_memory_info(this->dev()).total;
  const std::size_t pairs = device_memory / bytes + 4;  // more than the device could hold at once
  for (std::size_t i = 0; i < pairs; ++i) r.deallocate(r.allocate(bytes, s), bytes, s);
  EXPECT_EQ(r.statistics().reserved_bytes, reserved);
  hold.release();
  void* p = r.allocate(bytes, s);
  const auto seed = fresh_seed();
  device_fill_pattern(s, p, bytes, seed);
  EXPECT_TRUE(holds_pattern(memory_kind::device, s, p, bytes, seed));
  r.deallocate(p, bytes, s);
  s.synchronize();
  EXPECT_EQ(r.statistics().used_bytes, 0U);
}

// Memory freed on another stream is handed over once that stream reaches the
// free, instead of failing for want of room. Emulated only: on CUDA this is the
// driver's business (cudaMemPoolReuseAllowInternalDependencies).
TYPED_TEST(cuda_async_test, MemoryFreedOnAnotherStreamServesAnAllocationThatNeedsIt) {
  if (this->is_cuda()) GTEST_SKIP() << "the CUDA driver's reuse policy, not ours";
  mr::cuda_async_resource r{this->dev()};
  stream first{this->dev()};
  stream second{this->dev()};
  r.trim(0);
  const std::size_t bytes = get_memory_info(this->dev()).free / 5 * 3;  // two of them do not fit
  constexpr std::size_t checked = std::size_t{1} << 20;
  void* p = r.allocate(bytes, first);
  device_fill_pattern(first, p, checked, fresh_seed());
  r.deallocate(p, bytes, first);
  void* q = r.allocate(bytes, second);
  const auto seed = fresh_seed();
  device_fill_pattern(second, q, checked, seed);
  EXPECT_TRUE(holds_pattern(memory_kind::device, second, q, checked, seed));
  r.deallocate(q, bytes, second);
  second.synchronize();
  first.synchronize();
}

TYPED_TEST(cuda_async_test, OutOfMemorySaysWhatThePoolHolds) {
  mr::cuda_async_resource r{this->dev()};
  stream s{this->dev()};
  const auto total = get_memory_info(this->dev()).total;
  mr::scoped_allocation_label label{"too much"};
  try {
    (void)r.allocate(total * 2, s);
    FAIL() << "allocated twice the device's memory";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.info().requested, total * 2);
    EXPECT_EQ(e.info().label, "too much");
    EXPECT_EQ(e.info().device, this->dev());
    EXPECT_TRUE(e.info().reserved.has_value());
    EXPECT_THAT(e.what(), HasSubstr("cuda_async_resource"));
  }
}

TYPED_TEST(cuda_async_test, ReservesNoMoreThanMaxPoolSize) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  mr::cuda_async_resource r{this->dev(), mr::cuda_async_options{.max_pool_size = 64 * mib}};
  stream s{this->dev()};
  void* a = r.allocate(40 * mib, s);
  try {
    (void)r.allocate(40 * mib, s);
    FAIL() << "the pool reserved past its max_pool_size";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.info().limit, 64 * mib);
  }
  EXPECT_LE(r.statistics().reserved_bytes, 64 * mib);
  r.deallocate(a, 40 * mib, s);
  s.synchronize();
  if (this->is_cuda()) return;  // how the driver reuses what its pool holds is its own policy
  // What was freed is cached: a size it cannot serve gets the cache back first.
  void* b = r.allocate(60 * mib, s);
  EXPECT_LE(r.statistics().peak_reserved_bytes, 64 * mib);
  r.deallocate(b, 60 * mib, s);
  s.synchronize();
}

TEST(CudaAsyncResource, RefusesAMaxPoolSizeOfZero) {
  EXPECT_THROW((mr::cuda_async_resource{device_id::emulated(0), mr::cuda_async_options{.max_pool_size = 0}}),
               logic_error);
}

TEST(CudaAsyncResource, RefusesWhatIsNotADevice) {
  EXPECT_THROW(mr::cuda_async_resource{device_id::emulated(9)}, logic_error);
  if (device_count(device_kind::cuda) == 0) {
    EXPECT_THROW(mr::cuda_async_resource{device_id::cuda(0)}, unsupported_error);
  }
}

}  // namespace
}  // namespace syncmem::test
