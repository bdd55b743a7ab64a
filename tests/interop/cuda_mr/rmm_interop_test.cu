// ctest-labels: threaded
// RAPIDS RMM over syncmem and syncmem over RMM, through the cuda::mr adaptors:
// RMM's containers and thrust allocating from syncmem's caching_resource,
// syncmem tensors and syncmem's resource conformance over RMM's resources.
// Built only where RMM's CMake package is found (it needs a GPU to run).
#include <thrust/functional.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform.h>
#include <rmm/device_buffer.hpp>
#include <rmm/device_uvector.hpp>
#include <rmm/exec_policy.hpp>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/binning_memory_resource.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/mr/statistics_resource_adaptor.hpp>
#include <rmm/resource_ref.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "device_ops.hpp"
#include "pattern.hpp"
#include "resource_conformance.hpp"
#include "syncmem/cuda/device_mr_adaptor.hpp"
#include "syncmem/cuda/interop.hpp"
#include "syncmem/cuda/mr_upstream.hpp"
#include "syncmem/cuda/rmm_device_mr_adaptor.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/tensor.hpp"
#include "test_support.hpp"

namespace syncmem::test {
namespace {

static_assert(std::is_constructible_v<rmm::device_async_resource_ref, cuda::device_mr_adaptor&>);
static_assert(std::is_constructible_v<rmm::device_async_resource_ref, cuda::rmm_device_mr_adaptor&>);
static_assert(cuda::device_accessible_cccl_resource<rmm::device_async_resource_ref>);
static_assert(cuda::device_accessible_cccl_resource<rmm::mr::pool_memory_resource>);

device_id dev() { return device_id::cuda(0); }

::cuda::stream_ref rmm_view(const stream& s) { return ::cuda::stream_ref{cuda::native(s.view())}; }

__global__ void add_index(std::int32_t* v, std::size_t n) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < n) v[i] += static_cast<std::int32_t>(i);
}

// A functor, not a __device__ lambda: gtest's TestBody is private.
struct times_three {
  __device__ std::int64_t operator()(std::int32_t x) const { return static_cast<std::int64_t>(x) * 3; }
};

class rmm_over_syncmem : public ::testing::Test {
 protected:
  void SetUp() override { SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 1); }
};

// rmm::device_buffer takes the adaptor (a copy, referring to the caching
// resource); its memory holds what was copied in and what a kernel wrote.
TEST_F(rmm_over_syncmem, DeviceBufferFromTheCachingResource) {
  mr::caching_resource caching{dev()};
  stream s{dev()};
  const std::size_t bytes = 1 + rng()() % (8 << 20);
  const auto data = random_bytes(bytes);
  {
    rmm::device_buffer buffer{bytes, rmm_view(s), cuda::device_mr_adaptor{caching}};
    EXPECT_EQ(caching.statistics().live_allocations, 1U);
    EXPECT_GE(caching.statistics().requested_bytes, bytes);
    SYNCMEM_CUDA_TRY(
        cudaMemcpyAsync(buffer.data(), data.data(), bytes, cudaMemcpyHostToDevice, cuda::native(s.view())));
    device_add_bytes(s.view(), buffer.data(), bytes, 7);
    const auto back = read_device(s.view(), buffer.data(), bytes);
    for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(back[i], static_cast<std::uint8_t>(data[i] + 7)) << "byte " << i;
    // A copy on another stream, from the same resource.
    stream t{dev()};
    rmm::device_buffer copy{buffer, rmm_view(t), cuda::device_mr_adaptor{caching}};
    EXPECT_EQ(caching.statistics().live_allocations, 2U);
    const auto copied = read_device(t.view(), copy.data(), bytes);
    EXPECT_EQ(copied, back);
    buffer.resize(bytes / 2 + 1, rmm_view(s));
    const auto shrunk = read_device(s.view(), buffer.data(), bytes / 2 + 1);
    EXPECT_TRUE(std::equal(shrunk.begin(), shrunk.end(), back.begin()));
  }
  s.synchronize();
  EXPECT_EQ(caching.statistics().live_allocations, 0U);
}

// device_uvector and thrust with rmm::exec_policy: the vector and thrust's
// temporary memory (sort, scan) come from the caching resource.
TEST_F(rmm_over_syncmem, DeviceUvectorAndThrustWithExecPolicy) {
  mr::caching_resource caching{dev()};
  cuda::device_mr_adaptor adaptor{caching};
  stream s{dev()};
  const std::size_t n = 1000 + rng()() % 200000;
  std::vector<std::int32_t> host(n);
  for (auto& x : host) x = static_cast<std::int32_t>(rng()() % 2000001) - 1000000;

  rmm::device_uvector<std::int32_t> v{n, rmm_view(s), adaptor};
  SYNCMEM_CUDA_TRY(
      cudaMemcpyAsync(v.data(), host.data(), n * sizeof(std::int32_t), cudaMemcpyHostToDevice, cuda::native(s.view())));
  add_index<<<static_cast<unsigned>((n + 255) / 256), 256, 0, cuda::native(s.view())>>>(v.data(), n);
  SYNCMEM_CUDA_TRY(cudaGetLastError());
  for (std::size_t i = 0; i < n; ++i) host[i] += static_cast<std::int32_t>(i);

  const auto before = caching.statistics().allocations;
  thrust::sort(rmm::exec_policy(rmm_view(s), adaptor), v.begin(), v.end());
  EXPECT_GT(caching.statistics().allocations, before) << "thrust's temporary storage came from elsewhere";
  std::sort(host.begin(), host.end());

  rmm::device_uvector<std::int64_t> scanned{n, rmm_view(s), adaptor};
  thrust::transform(rmm::exec_policy(rmm_view(s), adaptor), v.begin(), v.end(), scanned.begin(), times_three{});
  thrust::inclusive_scan(rmm::exec_policy(rmm_view(s), adaptor), scanned.begin(), scanned.end(), scanned.begin());
  const std::int64_t sum = thrust::reduce(rmm::exec_policy(rmm_view(s), adaptor), v.begin(), v.end(), std::int64_t{0});

  const auto sorted = read_device(s.view(), v.data(), n * sizeof(std::int32_t));
  ASSERT_EQ(std::memcmp(sorted.data(), host.data(), n * sizeof(std::int32_t)), 0) << "sort";
  std::vector<std::int64_t> expected(n);
  std::int64_t running = 0;
  for (std::size_t i = 0; i < n; ++i) expected[i] = running += std::int64_t{host[i]} * 3;
  const auto scan = read_device(s.view(), scanned.data(), n * sizeof(std::int64_t));
  ASSERT_EQ(std::memcmp(scan.data(), expected.data(), n * sizeof(std::int64_t)), 0) << "scan";
  EXPECT_EQ(sum, std::accumulate(host.begin(), host.end(), std::int64_t{0}));
  EXPECT_EQ(caching.statistics().live_allocations, 2U) << "the two vectors; thrust's temporaries returned";
}

// The current device resource of RMM set to syncmem's: code that allocates
// with RMM's defaults gets syncmem's memory.
TEST_F(rmm_over_syncmem, AsRmmsCurrentDeviceResource) {
  mr::caching_resource caching{dev()};
  SYNCMEM_CUDA_TRY(cudaSetDevice(0));
  auto previous = rmm::mr::set_current_device_resource(cuda::device_mr_adaptor{caching});
  stream s{dev()};
  {
    rmm::device_uvector<float> v{12345, rmm_view(s)};
    EXPECT_EQ(caching.statistics().live_allocations, 1U);
  }
  s.synchronize();
  rmm::mr::set_current_device_resource(std::move(previous));
  EXPECT_EQ(caching.statistics().live_allocations, 0U);
}

// Where memory runs out, RMM's code catches rmm::out_of_memory:
// rmm_device_mr_adaptor throws it, with syncmem's message; device_mr_adaptor
// throws syncmem::out_of_memory, also a std::bad_alloc.
TEST_F(rmm_over_syncmem, OutOfMemoryIsRmmsOutOfMemoryThroughTheRmmAdaptor) {
  mr::caching_resource caching{dev(), mr::caching_options::parse("limit_mb:64")};
  stream s{dev()};
  try {
    rmm::device_buffer buffer{std::size_t{1} << 30, rmm_view(s), cuda::rmm_device_mr_adaptor{caching}};
    FAIL() << "no error";
  } catch (const rmm::out_of_memory& e) {
    EXPECT_NE(std::string{e.what()}.find("caching_resource(cuda:0)"), std::string::npos) << e.what();
  }
  cuda::rmm_device_mr_adaptor adaptor{caching};
  EXPECT_THROW((void)adaptor.allocate_sync(std::size_t{1} << 30), rmm::out_of_memory);
  EXPECT_THROW(rmm::device_buffer(std::size_t{1} << 30, rmm_view(s), cuda::device_mr_adaptor{caching}), std::bad_alloc);
  const std::size_t bytes = 1 + rng()() % (1 << 20);
  const auto seed = rng()();
  rmm::device_buffer fits{bytes, rmm_view(s), adaptor};
  device_fill_pattern(s.view(), fits.data(), bytes, seed);
  const auto back = read_device(s.view(), fits.data(), bytes);
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(back[i], pattern_byte(seed, i)) << "byte " << i;
}

// RMM's pool over the caching resource: syncmem underneath RMM's adaptors.
TEST_F(rmm_over_syncmem, RmmPoolOverTheCachingResource) {
  mr::caching_resource caching{dev()};
  rmm::mr::pool_memory_resource pool{cuda::device_mr_adaptor{caching}, std::size_t{64} << 20};
  EXPECT_GE(caching.statistics().allocated_bytes, std::size_t{64} << 20);
  stream s{dev()};
  const std::size_t bytes = 1 + rng()() % (4 << 20);
  const auto seed = rng()();
  rmm::device_buffer buffer{bytes, rmm_view(s), rmm::device_async_resource_ref{pool}};
  device_fill_pattern(s.view(), buffer.data(), bytes, seed);
  const auto back = read_device(s.view(), buffer.data(), bytes);
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(back[i], pattern_byte(seed, i)) << "byte " << i;
}

// Randomized stream ordering through RMM's containers: buffers allocated,
// written late (behind a device sleep), and freed on random streams of four;
// new buffers on other streams reuse the memory at once. Every live buffer
// must end with its own pattern: reuse before the freeing stream's work is
// done would let that late work overwrite it.
TEST_F(rmm_over_syncmem, RandomizedCrossStreamReuseKeepsEveryBuffersBytes) {
  mr::caching_resource caching{dev()};
  cuda::device_mr_adaptor adaptor{caching};
  std::vector<std::unique_ptr<stream>> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(std::make_unique<stream>(dev()));
  struct live {
    std::unique_ptr<rmm::device_buffer> buffer;
    std::size_t stream;
    std::uint64_t seed;
  };
  std::vector<live> buffers;
  auto& r = rng();
  for (int step = 0; step < 400; ++step) {
    if (!buffers.empty() && r() % 2 == 0) {
      // Free one: first queue late work on it, on its stream.
      const std::size_t k = r() % buffers.size();
      const auto& b = *streams[buffers[k].stream];
      device_sleep(b.view(), std::chrono::microseconds{r() % 200});
      device_add_bytes(b.view(), buffers[k].buffer->data(), buffers[k].buffer->size(), 1);
      buffers.erase(buffers.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    const std::size_t si = r() % streams.size();
    const std::size_t bytes = 1 + r() % (std::size_t{1} << (8 + r() % 14));
    live l{std::make_unique<rmm::device_buffer>(bytes, rmm_view(*streams[si]), adaptor), si, r()};
    device_fill_pattern(streams[si]->view(), l.buffer->data(), bytes, l.seed);
    buffers.push_back(std::move(l));
  }
  for (const auto& l : buffers) {
    const auto back = read_device(streams[l.stream]->view(), l.buffer->data(), l.buffer->size());
    for (std::size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], pattern_byte(l.seed, i)) << "byte " << i;
  }
  buffers.clear();
  for (auto& s : streams) s->synchronize();
  EXPECT_EQ(caching.statistics().live_allocations, 0U);
}

class syncmem_over_rmm : public ::testing::Test {
 protected:
  void SetUp() override { SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 1); }
};

// Tensors whose device memory comes from RMM's pool (counted by RMM's
// statistics adaptor): random data up, changed on the device, back.
TEST_F(syncmem_over_rmm, TensorsOverRmmsPool) {
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::pool_memory_resource pool{cuda_mr, std::size_t{32} << 20};
  rmm::mr::statistics_resource_adaptor counted{rmm::device_async_resource_ref{pool}};
  cuda::mr_upstream upstream{rmm::device_async_resource_ref{counted}, dev(), 256};
  synced_memory_options options;
  options.device_resource = &upstream;
  stream s{dev()};
  for (int round = 0; round < 4; ++round) {
    const std::size_t rows = 1 + rng()() % 300;
    const std::size_t cols = 1 + rng()() % 300;
    tensor t{dtype::uint8, shape{static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)}, dev(), options};
    const auto data = random_bytes(rows * cols);
    std::memcpy(t.mutable_host_data(), data.data(), data.size());
    device_add_bytes(s.view(), t.mutable_device_data(s.view()), data.size(), 9);
    EXPECT_EQ(counted.get_allocations_counter().value, 1);
    const auto* back = static_cast<const std::uint8_t*>(t.host_data());
    for (std::size_t i = 0; i < data.size(); ++i) {
      ASSERT_EQ(back[i], static_cast<std::uint8_t>(data[i] + 9)) << "round " << round << " byte " << i;
    }
  }
  s.synchronize();
  EXPECT_EQ(counted.get_allocations_counter().value, 0);
  EXPECT_EQ(counted.get_allocations_counter().total, 4);
}

// syncmem's resource conformance suite (alignments, bad arguments, live
// blocks keep their contents, many threads on many streams, cross-stream
// reuse waits for the freeing stream, statistics) over RMM's resources.
template <class Make>
struct over_rmm : on_device<device_kind::cuda> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<cuda::mr_upstream>(Make::resource(), device(), 256);
  }
};
struct rmm_pool {
  static rmm::mr::pool_memory_resource resource() {
    static rmm::mr::cuda_memory_resource upstream;
    return rmm::mr::pool_memory_resource{upstream, std::size_t{64} << 20};
  }
};
struct rmm_arena {
  static rmm::mr::arena_memory_resource resource() {
    static rmm::mr::cuda_memory_resource upstream;
    return rmm::mr::arena_memory_resource{upstream, std::size_t{256} << 20};
  }
};
struct rmm_binning {
  static rmm::mr::binning_memory_resource resource() {
    static rmm::mr::cuda_memory_resource upstream;
    return rmm::mr::binning_memory_resource{upstream, 8, 20};
  }
};
struct rmm_cuda_async {
  static rmm::mr::cuda_async_memory_resource resource() { return rmm::mr::cuda_async_memory_resource{}; }
};
using rmm_resources =
    ::testing::Types<over_rmm<rmm_pool>, over_rmm<rmm_arena>, over_rmm<rmm_binning>, over_rmm<rmm_cuda_async>>;
INSTANTIATE_TYPED_TEST_SUITE_P(rmm, resource_conformance, rmm_resources);

}  // namespace
}  // namespace syncmem::test
