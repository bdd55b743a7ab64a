#include "syncmem/cuda/pinned_mr_adaptor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cccl_refs.hpp"
#include "device_ops.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/cuda/interop.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {
namespace {

using cuda::pinned_mr_adaptor;
namespace cmr = ::cuda::mr;

static_assert(is_stream_ordered_with<pinned_mr_adaptor, cmr::host_accessible, cmr::device_accessible>);
static_assert(
    std::is_constructible_v<stream_ordered_ref<cmr::host_accessible, cmr::device_accessible>, pinned_mr_adaptor&>);
static_assert(std::is_constructible_v<stream_ordered_ref<cmr::device_accessible>, pinned_mr_adaptor&>);

TEST(pinned_mr_adaptor, RefusesEmulatedPinnedMemoryAndDeviceMemory) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::emulated, 1);
  mr::pinned_resource emulated_pinned{device_kind::emulated};
  EXPECT_THAT(error_of([&] { return pinned_mr_adaptor{emulated_pinned}; }),
              HasSubstr("which CUDA devices cannot access"));
  mr::caching_pinned_resource caching{emulated_pinned, {.fallback_to_pageable = false}};
  EXPECT_THAT(error_of([&] { return pinned_mr_adaptor{caching}; }), HasSubstr("which CUDA devices cannot access"));
  mr::caching_resource device_memory{device_id::emulated(0)};
  EXPECT_THAT(error_of([&] { return pinned_mr_adaptor{device_memory}; }), HasSubstr("not pinned host memory"));
}

TEST(pinned_mr_adaptor, RefusesACacheThatMayFallBackToPageableMemory) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::emulated, 1);
  mr::caching_pinned_resource caching{device_kind::emulated};  // fallback_to_pageable by default
  EXPECT_THAT(error_of([&] { return pinned_mr_adaptor{caching}; }), HasSubstr("fallback_to_pageable = false"));
}

TEST(pinned_mr_adaptor, CudaPinnedMemoryForHostAndDevice) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 1);
  mr::caching_pinned_resource caching{device_kind::cuda, {.fallback_to_pageable = false}};
  pinned_mr_adaptor adaptor{caching};
  EXPECT_EQ(adaptor, pinned_mr_adaptor{caching});
  stream_ordered_ref<cmr::host_accessible, cmr::device_accessible> ref{adaptor};
  stream s{device_id::cuda(0)};
  const ::cuda::stream_ref cs{cuda::native(s.view())};
  const std::size_t bytes = 1 + rng()() % (1 << 20);
  const auto data = random_bytes(bytes);
#if CCCL_VERSION >= 3001000
  void* p = ref.allocate(cs, bytes, 256);
#else
  void* p = ref.allocate_async(bytes, 256, cs);
#endif
  EXPECT_EQ(get_pointer_attributes(p).kind, memory_kind::pinned_host);
  std::memcpy(p, data.data(), bytes);  // host accessible
  device_add_bytes(s, p, bytes, 5);    // device accessible (mapped)
  s.synchronize();
  const auto* back = static_cast<const std::uint8_t*>(p);
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(back[i], static_cast<std::uint8_t>(data[i] + 5)) << "byte " << i;
#if CCCL_VERSION >= 3001000
  ref.deallocate(cs, p, bytes, 256);
#else
  ref.deallocate_async(p, bytes, 256, cs);
#endif
  void* q = adaptor.allocate_sync(bytes);
  adaptor.deallocate_sync(q, bytes);
  s.synchronize();
  EXPECT_EQ(caching.statistics().bytes_in_use, 0U);
}

}  // namespace
}  // namespace syncmem::test
