#include "syncmem/cuda/device_mr_adaptor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cccl_refs.hpp"
#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/cuda/interop.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/cuda_async_resource.hpp"
#include "syncmem/mr/pageable_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/statistics_adaptor.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {
namespace {

using cuda::device_mr_adaptor;
namespace cmr = ::cuda::mr;

// What CCCL checks when code takes the adaptor, in either CCCL's concepts.
static_assert(is_stream_ordered_with<device_mr_adaptor, cmr::device_accessible>);
static_assert(!::cuda::has_property<device_mr_adaptor, cmr::host_accessible>,
              "device memory must not claim host access");
static_assert(std::is_constructible_v<stream_ordered_ref<cmr::device_accessible>, device_mr_adaptor&>);
static_assert(!std::is_constructible_v<stream_ordered_ref<cmr::host_accessible>, device_mr_adaptor&>);
static_assert(std::is_nothrow_copy_constructible_v<device_mr_adaptor>);

TEST(device_mr_adaptor, RefusesResourcesOfEmulatedDevicesNamingThem) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::emulated, 1);
  mr::caching_resource caching{device_id::emulated(0)};
  const auto message = error_of([&] { return device_mr_adaptor{caching}; });
  EXPECT_THAT(message, HasSubstr("caching_resource(emulated:0)"));
  EXPECT_THAT(message, HasSubstr("only resources of CUDA devices can be adapted"));
}

TEST(device_mr_adaptor, RefusesHostResources) {
  mr::pageable_resource pageable;
  const auto message = error_of([&] { return device_mr_adaptor{pageable}; });
  EXPECT_THAT(message, HasSubstr("not device memory"));
  EXPECT_THAT(message, HasSubstr("pinned_mr_adaptor"));
}

class device_mr_adaptor_cuda : public ::testing::Test {
 protected:
  void SetUp() override { SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 1); }
  static device_id dev() { return device_id::cuda(0); }
};

// Through a type-erased ref, as RMM and CCCL code hold it: allocations reach
// the caching resource on the stream given, and hold what the device wrote.
TEST_F(device_mr_adaptor_cuda, ServesCcclRefsFromTheCachingResource) {
  mr::caching_resource caching{dev()};
  device_mr_adaptor adaptor{caching};
  stream_ordered_ref<cmr::device_accessible> ref{adaptor};
  stream s{dev()};
  const ::cuda::stream_ref cs{cuda::native(s.view())};
  std::vector<void*> blocks;
  std::vector<std::size_t> sizes;
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < 16; ++i) {
    const std::size_t bytes = 1 + rng()() % (4 << 20);
#if CCCL_VERSION >= 3001000
    void* p = ref.allocate(cs, bytes, 256);
#else
    void* p = ref.allocate_async(bytes, 256, cs);
#endif
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0U);
    seeds.push_back(rng()());
    device_fill_pattern(s, p, bytes, seeds.back());
    blocks.push_back(p);
    sizes.push_back(bytes);
  }
  EXPECT_EQ(caching.statistics().live_allocations, 16U);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const auto back = read_device(s, blocks[i], sizes[i]);
    for (std::size_t b = 0; b < sizes[i]; ++b) ASSERT_EQ(back[b], pattern_byte(seeds[i], b)) << "block " << i;
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
#if CCCL_VERSION >= 3001000
    ref.deallocate(cs, blocks[i], sizes[i], 256);
#else
    ref.deallocate_async(blocks[i], sizes[i], 256, cs);
#endif
  }
  s.synchronize();
  EXPECT_EQ(caching.statistics().live_allocations, 0U);
}

// A block freed on one stream while that stream still has queued work on it
// is not handed to another stream before that work: the stream contract
// holds through the adaptor.
TEST_F(device_mr_adaptor_cuda, CrossStreamReuseWaitsForTheFreeingStream) {
  if (!stream_holds_allowed()) GTEST_SKIP() << "stream holds are off (compute-sanitizer initcheck)";
  mr::caching_resource caching{dev()};
  device_mr_adaptor adaptor{caching};
  stream a{dev()};
  stream b{dev()};
  constexpr std::size_t bytes = 1 << 20;
  const auto seed = rng()();
  void* p = adaptor.allocate(::cuda::stream_ref{cuda::native(a.view())}, bytes);
  device_fill_pattern(a, p, bytes, seed);
  stream_latch hold{a};
  device_add_bytes(a, p, bytes, 1);  // queued behind the latch: still to run when p is freed
  adaptor.deallocate(::cuda::stream_ref{cuda::native(a.view())}, p, bytes);
  void* q = adaptor.allocate(::cuda::stream_ref{cuda::native(b.view())}, bytes);
  device_fill_pattern(b, q, bytes, seed ^ 1);  // ordered after a's add when q == p
  hold.release();
  const auto back = read_device(b, q, bytes);
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(back[i], pattern_byte(seed ^ 1, i)) << "byte " << i;
  adaptor.deallocate(::cuda::stream_ref{cuda::native(b.view())}, q, bytes);
  b.synchronize();
}

TEST_F(device_mr_adaptor_cuda, SyncCallsGiveMemoryUsableAtOnce) {
  mr::statistics_adaptor counted{mr::default_resource(dev())};
  device_mr_adaptor adaptor{counted};
  const std::size_t bytes = 1 + rng()() % (1 << 20);
  void* p = adaptor.allocate_sync(bytes);
  ASSERT_NE(p, nullptr);
  stream s{dev()};
  const auto seed = rng()();
  device_fill_pattern(s, p, bytes, seed);
  const auto back = read_device(s, p, bytes);
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(back[i], pattern_byte(seed, i));
  adaptor.deallocate_sync(p, bytes);
  EXPECT_EQ(counted.statistics().bytes.current, 0);
}

TEST_F(device_mr_adaptor_cuda, EqualWhenTheResourcesAre) {
  mr::caching_resource one{dev()};
  mr::caching_resource two{dev()};
  EXPECT_EQ(device_mr_adaptor{one}, device_mr_adaptor{one});
  EXPECT_NE(device_mr_adaptor{one}, device_mr_adaptor{two});
  EXPECT_EQ(device_mr_adaptor{one}.device(), dev());
  EXPECT_EQ(&device_mr_adaptor{one}.resource(), &one);
}

TEST_F(device_mr_adaptor_cuda, OutOfMemoryIsABadAlloc) {
  mr::caching_resource caching{dev(), mr::caching_options::parse("limit_mb:64")};
  device_mr_adaptor adaptor{caching};
  stream s{dev()};
  EXPECT_THROW((void)adaptor.allocate(::cuda::stream_ref{cuda::native(s.view())}, std::size_t{1} << 30),
               std::bad_alloc);
}

}  // namespace
}  // namespace syncmem::test
