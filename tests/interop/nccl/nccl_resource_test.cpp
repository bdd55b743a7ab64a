// syncmem::nccl::nccl_resource: ncclMemAlloc memory through the resource
// interface, alone and under a caching_resource whose segments a communicator
// registers. CUDA devices only; emulated devices are refused, by name.
#include "syncmem/nccl/nccl_resource.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/device_buffer.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/nccl/communicator.hpp"
#include "syncmem/nccl/group.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {
namespace {

TEST(nccl_resource, RefusesEmulatedDevicesByName) {
  EXPECT_THAT(error_of([] { return nccl::nccl_resource{device_id::emulated(0)}; }),
              HasSubstr("emulated:0 is not a CUDA device"));
}

TEST(nccl_resource, HandsOutDeviceMemoryThatHoldsWhatIsWritten) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 1);
  const auto device = device_id::cuda(0);
  nccl::nccl_resource resource{device};
  EXPECT_EQ(resource.name(), "nccl_resource(cuda:0)");
  EXPECT_TRUE(resource.is_equal(nccl::nccl_resource{device}));
  stream s{device};
  const std::size_t bytes = (std::size_t{3} << 20) + 123;
  void* p = resource.allocate(bytes, s);
  ASSERT_NE(p, nullptr);
  const auto a = get_pointer_attributes(p);
  EXPECT_EQ(a.kind, memory_kind::device);
  EXPECT_EQ(a.device, device);
  const std::uint64_t seed = fresh_seed();
  device_fill_pattern(s, p, bytes, seed);
  const auto got = read_device(s, p, bytes);
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(got[i], pattern_byte(seed, i)) << "byte " << i;
  resource.deallocate(p, bytes, s);
}

// Cached segments of NCCL's memory, registered, carry an all-reduce.
TEST(nccl_resource, FeedsARegisteredCachingResource) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 2);
  const std::vector<device_id> devices{device_id::cuda(0), device_id::cuda(1)};
  std::vector<std::unique_ptr<nccl::nccl_resource>> upstreams;
  std::vector<std::unique_ptr<mr::caching_resource>> pools;
  for (const auto d : devices) {
    upstreams.push_back(std::make_unique<nccl::nccl_resource>(d));
    pools.push_back(std::make_unique<mr::caching_resource>(d, mr::caching_options{}, upstreams.back().get()));
  }
  auto comms = nccl::communicator::create_all(devices);
  std::vector<stream> streams;
  std::vector<device_buffer> buffers;
  std::vector<std::vector<std::int32_t>> inputs;
  constexpr std::size_t count = std::size_t{1} << 20;
  std::uniform_int_distribution<std::int32_t> pick{-1000, 1000};
  for (std::size_t r = 0; r < 2; ++r) {
    comms[r].register_segments(*pools[r]);
    streams.emplace_back(devices[r]);
    inputs.emplace_back(count);
    for (auto& v : inputs.back()) v = pick(rng());
    buffers.emplace_back(inputs.back().data(), count * sizeof(std::int32_t), streams.back(), pools[r].get());
  }
  {
    nccl::group g;
    for (std::size_t r = 0; r < 2; ++r) {
      comms[r].all_reduce(buffers[r], buffers[r], dtype::int32, nccl::reduce_op::sum, streams[r]);
    }
    g.end();
  }
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_GE(comms[r].registrations().segments, 1U);
    EXPECT_EQ(comms[r].registrations().failures, 0U);
    std::vector<std::int32_t> got(count);
    buffers[r].copy_to_host(got.data(), count * sizeof(std::int32_t), streams[r]);
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], inputs[0][i] + inputs[1][i]) << "rank " << r << " " << i;
  }
  buffers.clear();
  comms.clear();
  pools.clear();
}

}  // namespace
}  // namespace syncmem::test
