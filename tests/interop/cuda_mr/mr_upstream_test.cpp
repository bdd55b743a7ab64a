// ctest-labels: threaded
#include "syncmem/cuda/mr_upstream.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <new>
#include <vector>

#include "cccl_refs.hpp"
#include "device_ops.hpp"
#include "pattern.hpp"
#include "resource_conformance.hpp"
#include "syncmem/cuda/device_mr_adaptor.hpp"
#include "syncmem/cuda/interop.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/cuda_async_resource.hpp"
#include "syncmem/mr/limiting_adaptor.hpp"
#include "syncmem/synced_memory.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {
namespace {

namespace cmr = ::cuda::mr;

// A cuda::mr resource in both CCCL spellings that records the streams it is
// given and forwards to a syncmem resource through device_mr_adaptor.
struct recording_resource {
  cuda::device_mr_adaptor to;
  std::shared_ptr<std::atomic<cudaStream_t>> last_stream = std::make_shared<std::atomic<cudaStream_t>>(nullptr);
  std::shared_ptr<std::atomic<bool>> fail = std::make_shared<std::atomic<bool>>(false);

  void* allocate(::cuda::stream_ref s, std::size_t bytes, std::size_t alignment) {
    if (*fail) throw std::bad_alloc{};
    *last_stream = s.get();
    return to.allocate(s, bytes, alignment);
  }
  void deallocate(::cuda::stream_ref s, void* p, std::size_t bytes, std::size_t alignment) noexcept {
    *last_stream = s.get();
    to.deallocate(s, p, bytes, alignment);
  }
  void* allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref s) {
    return allocate(s, bytes, alignment);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, ::cuda::stream_ref s) noexcept {
    deallocate(s, p, bytes, alignment);
  }
  void* allocate_sync(std::size_t bytes, std::size_t alignment) { return to.allocate_sync(bytes, alignment); }
  void deallocate_sync(void* p, std::size_t bytes, std::size_t alignment) noexcept {
    to.deallocate_sync(p, bytes, alignment);
  }
  void* allocate(std::size_t bytes, std::size_t alignment) { return allocate_sync(bytes, alignment); }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept { deallocate_sync(p, bytes, alignment); }
  friend bool operator==(const recording_resource& a, const recording_resource& b) noexcept { return a.to == b.to; }
  friend void get_property(const recording_resource&, cmr::device_accessible) noexcept {}
};

// A resource that is never called: the tests of argument checks need one.
template <class Property>
struct never_called_resource {
  void* allocate(::cuda::stream_ref, std::size_t, std::size_t) { return nullptr; }
  void deallocate(::cuda::stream_ref, void*, std::size_t, std::size_t) noexcept {}
  void* allocate_async(std::size_t, std::size_t, ::cuda::stream_ref) { return nullptr; }
  void deallocate_async(void*, std::size_t, std::size_t, ::cuda::stream_ref) noexcept {}
  void* allocate_sync(std::size_t, std::size_t) { return nullptr; }
  void deallocate_sync(void*, std::size_t, std::size_t) noexcept {}
  void* allocate(std::size_t, std::size_t) { return nullptr; }
  void deallocate(void*, std::size_t, std::size_t) noexcept {}
  friend bool operator==(const never_called_resource&, const never_called_resource&) noexcept { return true; }
  friend void get_property(const never_called_resource&, Property) noexcept {}
};
using host_only_resource = never_called_resource<cmr::host_accessible>;
using device_resource_never_called = never_called_resource<cmr::device_accessible>;

static_assert(cuda::device_accessible_cccl_resource<recording_resource>);
static_assert(cuda::device_accessible_cccl_resource<cuda::device_mr_adaptor>);
static_assert(cuda::device_accessible_cccl_resource<stream_ordered_ref<cmr::device_accessible>>,
              "a type-erased ref is taken, to refer to a resource without owning it");
static_assert(!cuda::device_accessible_cccl_resource<host_only_resource>);
static_assert(!std::is_constructible_v<cuda::mr_upstream, host_only_resource, device_id>,
              "memory that is not device accessible cannot be device memory");

TEST(mr_upstream, RefusesEmulatedDevicesNamingThem) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::emulated, 1);
  const auto message = error_of(
      [&] { return std::make_unique<cuda::mr_upstream>(device_resource_never_called{}, device_id::emulated(0)); });
  EXPECT_THAT(message, HasSubstr("emulated:0 is not a CUDA device"));
  EXPECT_THAT(error_of([&] {
                return std::make_unique<cuda::mr_upstream>(device_resource_never_called{}, device_id::cuda(0), 3);
              }),
              HasSubstr("max_alignment 3 is not a power of two"));
}

// The conformance suite every syncmem resource passes, over a cuda::mr
// resource (itself over the caching resource, through device_mr_adaptor).
mr::memory_resource& shared_caching() {
  static auto* r = new mr::caching_resource{device_id::cuda(0)};  // never destroyed: outlives every test
  return *r;
}
struct upstream_cuda : on_device<device_kind::cuda> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<cuda::mr_upstream>(recording_resource{cuda::device_mr_adaptor{shared_caching()}}, device());
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(mr_upstream, resource_conformance, ::testing::Types<upstream_cuda>);

class mr_upstream_cuda : public ::testing::Test {
 protected:
  void SetUp() override { SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 1); }
  static device_id dev() { return device_id::cuda(0); }
};

TEST_F(mr_upstream_cuda, PassesTheCudaStreamOfEachCall) {
  mr::cuda_async_resource pool{dev()};
  recording_resource recording{cuda::device_mr_adaptor{pool}};
  cuda::mr_upstream upstream{recording, dev()};
  EXPECT_EQ(upstream.name(), "mr_upstream(cuda:0)");
  EXPECT_EQ(upstream.kind(), memory_kind::device);
  EXPECT_EQ(upstream.device(), dev());
  stream a{dev()};
  stream b{dev()};
  void* p = upstream.allocate(4096, a);
  EXPECT_EQ(recording.last_stream->load(), cuda::native(a.view()));
  upstream.deallocate(p, 4096, b);
  EXPECT_EQ(recording.last_stream->load(), cuda::native(b.view()));
  EXPECT_EQ(upstream.allocate(0, a), nullptr);
  b.synchronize();
}

TEST_F(mr_upstream_cuda, BadAllocBecomesOutOfMemoryNamingTheRequest) {
  mr::cuda_async_resource pool{dev()};
  recording_resource recording{cuda::device_mr_adaptor{pool}};
  *recording.fail = true;
  cuda::mr_upstream upstream{recording, dev()};
  stream s{dev()};
  try {
    (void)upstream.allocate(12345, s);
    FAIL() << "no error";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.info().requested, 12345U);
    EXPECT_EQ(e.info().resource, "mr_upstream(cuda:0)");
  }
}

TEST_F(mr_upstream_cuda, EqualWhenTheResourcesAre) {
  mr::caching_resource one{dev()};
  mr::caching_resource two{dev()};
  cuda::mr_upstream a{cuda::device_mr_adaptor{one}, dev()};
  cuda::mr_upstream b{cuda::device_mr_adaptor{one}, dev()};
  cuda::mr_upstream c{cuda::device_mr_adaptor{two}, dev()};
  cuda::mr_upstream d{recording_resource{cuda::device_mr_adaptor{one}}, dev()};
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_FALSE(a.is_equal(c));
  EXPECT_FALSE(a.is_equal(d)) << "another resource type";
}

// synced_memory over a cuda::mr resource, with syncmem's adaptors between:
// random data up and back, on a stream of the user's.
TEST_F(mr_upstream_cuda, SyncedMemoryOverACcclResource) {
  mr::cuda_async_resource pool{dev()};
  cuda::mr_upstream upstream{cuda::device_mr_adaptor{pool}, dev()};
  mr::limiting_adaptor limited{upstream, std::size_t{64} << 20};
  synced_memory_options options;
  options.device_resource = &limited;
  const std::size_t bytes = 1 + rng()() % (8 << 20);
  const auto data = random_bytes(bytes);
  synced_memory m{bytes, dev(), options};
  std::memcpy(m.mutable_host_data(), data.data(), bytes);
  stream s{dev()};
  void* d = m.mutable_device_data(s);
  device_add_bytes(s, d, bytes, 3);
  const auto* back = static_cast<const std::uint8_t*>(m.host_data());
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(back[i], static_cast<std::uint8_t>(data[i] + 3)) << "byte " << i;
}

}  // namespace
}  // namespace syncmem::test
