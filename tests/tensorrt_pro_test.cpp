// tensorRT_Pro's MixMemory and AutoDevice on syncmem, state by state as the
// seed describes them, on the compat device (CUDA when there is a GPU, else
// emulated).
#include "syncmem/compat/tensorrt_pro.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "counting_resource.hpp"
#include "syncmem/compat/device.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "test_support.hpp"

namespace syncmem {
namespace {

using compat::trt::AutoDevice;
using compat::trt::MixMemory;

std::vector<std::uint8_t> read_device(const void* p, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  copy(out.data(), p, n, default_stream(compat::current()));
  return out;
}

TEST(MixMemory, StartsEmptyOnTheCurrentDevice) {
  MixMemory m;
  EXPECT_EQ(m.cpu(), nullptr);
  EXPECT_EQ(m.gpu(), nullptr);
  EXPECT_EQ(m.cpu_size(), 0U);
  EXPECT_EQ(m.gpu_size(), 0U);
  EXPECT_TRUE(m.owner_cpu());
  EXPECT_TRUE(m.owner_gpu());
  EXPECT_EQ(m.device_id(), compat::current().index());
}

TEST(MixMemory, GpuGrowsOnlyAndZeroFills) {
  MixMemory m;
  void* a = m.gpu(100);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(m.gpu_size(), 100U);
  EXPECT_EQ(read_device(a, 100), std::vector<std::uint8_t>(100, 0));
  // Smaller requests reuse the block as it is ("give the size, get the address").
  EXPECT_EQ(m.gpu(10), a);
  EXPECT_EQ(m.gpu_size(), 100U);
  EXPECT_EQ(m.gpu(100), a);
  void* b = m.gpu(1000);
  EXPECT_EQ(m.gpu_size(), 1000U);
  EXPECT_EQ(read_device(b, 1000), std::vector<std::uint8_t>(1000, 0));
  EXPECT_EQ(m.gpu(999), b);
  EXPECT_EQ(get_pointer_attributes(b).kind, memory_kind::device);
}

TEST(MixMemory, CpuIsPinnedGrowsOnlyAndZeroFills) {
  MixMemory m;
  float* a = m.cpu<float>(25);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(m.cpu_size(), 100U);
  for (int i = 0; i < 25; ++i) EXPECT_EQ(a[i], 0.0F);
  EXPECT_EQ(get_pointer_attributes(a).kind, memory_kind::pinned_host);
  a[3] = 520.25F;
  EXPECT_EQ(m.cpu<float>(10), a);
  EXPECT_EQ(m.cpu<float>()[3], 520.25F);
  float* b = m.cpu<float>(250);
  EXPECT_EQ(m.cpu_size(), 1000U);
  EXPECT_EQ(b[3], 0.0F);  // a new block, zero-filled
}

TEST(MixMemory, TypedAccessorsCheckOverflow) {
  MixMemory m;
  EXPECT_THROW((void)m.gpu<double>(~std::size_t{0} / 4), logic_error);
  EXPECT_THROW((void)m.cpu<double>(~std::size_t{0} / 4), logic_error);
  EXPECT_EQ(m.gpu_size(), 0U);
}

TEST(MixMemory, ReferencedMemoryIsNotOwnedUntilItMustGrow) {
  const auto device = compat::current();
  test::scoped_counting_default counting{device};
  std::vector<std::uint8_t> host(64, 7);
  void* external_gpu = mr::get_per_device_resource(device).allocate(64, default_stream(device));
  {
    MixMemory m{host.data(), host.size(), external_gpu, 64};
    EXPECT_FALSE(m.owner_cpu());
    EXPECT_FALSE(m.owner_gpu());
    EXPECT_EQ(m.cpu(), host.data());
    EXPECT_EQ(m.gpu(32), external_gpu);  // fits: the external memory is used
    EXPECT_EQ(counting.resource().live.load(), 1);
    // Growing past the external memory: the original allocated with owner_gpu_
    // still false and leaked it. Here the new memory is owned and freed.
    void* grown = m.gpu(4096);
    EXPECT_NE(grown, external_gpu);
    EXPECT_TRUE(m.owner_gpu());
    EXPECT_EQ(counting.resource().live.load(), 2);
    (void)m.cpu(1000);
    EXPECT_TRUE(m.owner_cpu());
    EXPECT_EQ(host, std::vector<std::uint8_t>(64, 7));  // the external host memory is untouched
  }
  EXPECT_EQ(counting.resource().live.load(), 1);  // only the external block, which is ours to free
  mr::get_per_device_resource(device).deallocate(external_gpu, 64, default_stream(device));
  EXPECT_EQ(counting.resource().live.load(), 0);
}

TEST(MixMemory, ReferenceDataWithNullOrEmptyMakesThatSideEmptyAndOwned) {
  std::vector<std::uint8_t> host(8);
  MixMemory m;
  m.reference_data(host.data(), 0, nullptr, 100);
  EXPECT_EQ(m.cpu(), nullptr);
  EXPECT_EQ(m.cpu_size(), 0U);
  EXPECT_EQ(m.gpu(), nullptr);
  EXPECT_EQ(m.gpu_size(), 0U);
  EXPECT_TRUE(m.owner_cpu());
  EXPECT_TRUE(m.owner_gpu());
}

TEST(MixMemory, ReleaseFreesOwnedSides) {
  const auto device = compat::current();
  test::scoped_counting_default counting{device};
  MixMemory m;
  (void)m.gpu(100);
  (void)m.cpu(100);
  EXPECT_EQ(counting.resource().live.load(), 1);
  m.release_gpu();
  EXPECT_EQ(m.gpu(), nullptr);
  EXPECT_EQ(m.gpu_size(), 0U);
  EXPECT_EQ(counting.resource().live.load(), 0);
  EXPECT_NE(m.cpu(), nullptr);
  m.release_all();
  EXPECT_EQ(m.cpu(), nullptr);
  EXPECT_EQ(m.cpu_size(), 0U);
}

TEST(MixMemory, MovesTransferOwnership) {
  const auto device = compat::current();
  test::scoped_counting_default counting{device};
  {
    MixMemory a;
    void* p = a.gpu(256);
    MixMemory b{std::move(a)};
    EXPECT_EQ(b.gpu(), p);
    EXPECT_EQ(a.gpu(), nullptr);  // NOLINT(bugprone-use-after-move)
    MixMemory c;
    (void)c.gpu(16);
    c = std::move(b);
    EXPECT_EQ(c.gpu(), p);
    EXPECT_EQ(counting.resource().live.load(), 1);
  }
  EXPECT_EQ(counting.resource().live.load(), 0);
}

TEST(MixMemory, InvalidDeviceIdsAreRefused) {
  EXPECT_THROW(MixMemory{device_count(compat::kind())}, logic_error);
  EXPECT_THROW(MixMemory{-2}, logic_error);
}

TEST(AutoDevice, SwitchesAndRestores) {
  std::thread{[] {
    const auto before = current_device();
    {
      AutoDevice guard{device_count(compat::kind()) - 1};
      EXPECT_EQ(current_device(), device_id(compat::kind(), device_count(compat::kind()) - 1));
    }
    EXPECT_EQ(current_device(), before);
  }}.join();
  EXPECT_THROW(AutoDevice{99}, logic_error);
}

}  // namespace
}  // namespace syncmem
