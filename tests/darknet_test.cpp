// darknet's cuda_* helpers on syncmem, call by call as the seed describes, on
// the compat device (CUDA when there is a GPU, else emulated).
#include "syncmem/compat/darknet.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "counting_resource.hpp"
#include "syncmem/compat/device.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/error.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;
using ::testing::Not;
namespace dn = syncmem::compat::darknet;

namespace syncmem {
namespace {

std::vector<float> random_floats(std::size_t n) {
  std::vector<float> v(n);
  std::uniform_real_distribution<float> pick{-1000.0F, 1000.0F};
  for (auto& x : v) x = pick(test::rng());
  return v;
}

template <class T>
std::vector<T> read_back(const T* device, std::size_t n) {
  std::vector<T> out(n);
  copy(out.data(), device, n * sizeof(T), default_stream(compat::current()));
  return out;
}

TEST(Darknet, MakeArrayUploadsTheHostArray) {
  const std::size_t n = 1 + test::rng()() % 10000;
  auto x = random_floats(n);
  float* x_gpu = dn::cuda_make_array(x.data(), n);
  ASSERT_NE(x_gpu, nullptr);
  EXPECT_EQ(get_pointer_attributes(x_gpu).kind, memory_kind::device);
  EXPECT_EQ(read_back(x_gpu, n), x);
  dn::cuda_free(x_gpu);
}

TEST(Darknet, MakeArrayOfNullIsZeros) {
  const std::size_t n = 4096;
  float* x_gpu = dn::cuda_make_array(nullptr, n);
  EXPECT_EQ(read_back(x_gpu, n), std::vector<float>(n, 0.0F));
  int* i_gpu = dn::cuda_make_int_array(nullptr, n);
  EXPECT_EQ(read_back(i_gpu, n), std::vector<int>(n, 0));
  dn::cuda_free(x_gpu);
  dn::cuda_free(i_gpu);
}

TEST(Darknet, IntArraysRoundTrip) {
  const std::size_t n = 777;
  std::vector<int> x(n);
  for (auto& v : x) v = static_cast<int>(test::rng()());
  int* x_gpu = dn::cuda_make_int_array(x.data(), n);
  EXPECT_EQ(read_back(x_gpu, n), x);
  dn::cuda_free(x_gpu);
}

TEST(Darknet, PushAndPullWholeArraysAndSlices) {
  const std::size_t n = 5000;
  float* x_gpu = dn::cuda_make_array(nullptr, n);
  auto x = random_floats(n);
  dn::cuda_push_array(x_gpu, x.data(), n);
  std::vector<float> back(n);
  dn::cuda_pull_array(x_gpu, back.data(), n);
  EXPECT_EQ(back, x);
  // darknet pushes layer outputs into offsets of one array.
  auto part = random_floats(100);
  dn::cuda_push_array(x_gpu + 1234, part.data(), 100);
  std::copy(part.begin(), part.end(), x.begin() + 1234);
  dn::cuda_pull_array(x_gpu, back.data(), n);
  EXPECT_EQ(back, x);
  std::vector<float> slice(10);
  dn::cuda_pull_array(x_gpu + 4990, slice.data(), 10);
  EXPECT_EQ(slice, std::vector<float>(x.begin() + 4990, x.end()));
  dn::cuda_free(x_gpu);
}

TEST(Darknet, BadCallsAreErrorsNotCrashes) {
  float* x_gpu = dn::cuda_make_array(nullptr, 100);
  std::vector<float> host(200);
  EXPECT_THROW(dn::cuda_push_array(x_gpu, host.data(), 101), logic_error);  // past the end
  EXPECT_THROW(dn::cuda_pull_array(x_gpu + 50, host.data(), 51), logic_error);
  EXPECT_THROW(dn::cuda_push_array(x_gpu, nullptr, 10), logic_error);
  EXPECT_THROW(dn::cuda_push_array(host.data(), host.data(), 10), logic_error);  // not a device array
  EXPECT_THROW(dn::cuda_free(x_gpu + 1), logic_error);
  dn::cuda_free(x_gpu);
  EXPECT_THROW(dn::cuda_free(x_gpu), logic_error);  // twice
  dn::cuda_free(static_cast<float*>(nullptr));
  EXPECT_THROW((void)dn::cuda_make_array(nullptr, ~std::size_t{0} / 2), logic_error);  // overflow
}

TEST(Darknet, OutOfMemoryStatesTheRealCause) {
  const auto device = compat::current();
  const std::size_t n = get_memory_info(device).total;  // n floats: four times the device
  try {
    (void)dn::cuda_make_array(nullptr, n);
    FAIL() << "did not throw";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.info().requested, n * sizeof(float));
    EXPECT_EQ(e.info().device, device);
    EXPECT_EQ(e.info().label, "cuda_make_array");
    EXPECT_THAT(e.what(), Not(HasSubstr("subdivisions")));
  }
}

TEST(Darknet, EverythingMadeIsFreed) {
  const auto device = compat::current();
  test::scoped_counting_default counting{device};
  std::vector<float*> arrays;
  for (int i = 0; i < 10; ++i) arrays.push_back(dn::cuda_make_array(nullptr, 100 + i));
  EXPECT_EQ(counting.resource().live.load(), 10);
  for (auto* a : arrays) dn::cuda_free(a);
  EXPECT_EQ(counting.resource().live.load(), 0);
}

TEST(Darknet, UsesTheDefaultStreamOfTheCurrentDevice) {
  EXPECT_EQ(dn::get_cuda_stream(), default_stream(compat::current()));
}

}  // namespace
}  // namespace syncmem
