// device_vector: typed elements on the device, set by copies, element-wise
// kernels and single-element access, checked element by element; resizes that
// keep values; errors that name the vector.
#include "syncmem/device_vector.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "syncmem/elementwise.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/statistics_adaptor.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

template <class Kind>
class DeviceVector : public test::device_test<Kind> {};
TYPED_TEST_SUITE(DeviceVector, test::device_kinds, test::device_kind_names);

using test::error_of;

TYPED_TEST(DeviceVector, CopiesInAndOutElementForElement) {
  stream s{this->dev()};
  const std::size_t n = 1 + test::rng()() % 20000;
  std::vector<double> host(n);
  for (auto& v : host) v = static_cast<double>(test::rng()()) / 3.0;
  device_vector<double> v{host, s};
  EXPECT_EQ(v.size(), n);
  EXPECT_EQ(v.to_host(s), host);
  const std::size_t i = test::rng()() % n;
  EXPECT_EQ(v.element(i, s), host[i]);
  v.set_element(i, -1.5, s);
  host[i] = -1.5;
  EXPECT_EQ(v.to_host(s), host);
  EXPECT_EQ(checksum(v.span(), s), host_checksum(std::span<const double>{host}));
  const device_vector<double> copy = v.clone(s);
  EXPECT_NE(copy.data(), v.data());
  EXPECT_EQ(copy.to_host(s), host);
}

TYPED_TEST(DeviceVector, ElementsAreInitialisedOnlyWhenAsked) {
  stream s{this->dev()};
  mr::statistics_adaptor counted{mr::get_per_device_resource(this->dev())};
  const std::size_t n = 1 + test::rng()() % 20000;
  device_vector<std::int32_t> v{n, s, &counted};  // an allocation, nothing else
  EXPECT_EQ(counted.statistics().bytes.current, static_cast<std::int64_t>(n * sizeof(std::int32_t)));
  const auto start = static_cast<std::int64_t>(test::rng()() % 1000);
  iota(v.span(), start, s);
  const auto values = v.to_host(s);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(values[i], start + static_cast<std::int64_t>(i));
  const auto seven = static_cast<std::uint16_t>(test::rng()());
  device_vector<std::uint16_t> filled{n, seven, s};
  EXPECT_EQ(filled.to_host(s), std::vector<std::uint16_t>(n, seven));
}

TYPED_TEST(DeviceVector, ResizeKeepsTheFirstElements) {
  stream s{this->dev()};
  const std::size_t n = 2 + test::rng()() % 5000;
  device_vector<float> v{n, s};
  iota(v.span(), 0, s);
  v.resize(n * 3, s);
  EXPECT_EQ(v.size(), n * 3);
  auto values = v.to_host(s);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(values[i], static_cast<float>(i));
  v.resize(n / 2, s);
  v.shrink_to_fit(s);
  EXPECT_EQ(v.capacity(), n / 2);
  values = v.to_host(s);
  for (std::size_t i = 0; i < n / 2; ++i) ASSERT_EQ(values[i], static_cast<float>(i));
  v.reserve(n * 10, s);
  EXPECT_EQ(v.size(), n / 2);
  EXPECT_EQ(v.to_host(s), values);
}

TYPED_TEST(DeviceVector, BadIndicesAndSizesAreRefusedNamingTheVector) {
  stream s{this->dev()};
  device_vector<std::int64_t> v{10, s};
  const std::string index = error_of([&] { (void)v.element(10, s); });
  EXPECT_THAT(index, HasSubstr("device_vector (device_buffer of 80 B from "));
  EXPECT_THAT(index, HasSubstr("element(10) is out of range: the vector has 10 elements"));
  EXPECT_THAT(error_of([&] { v.set_element(11, 0, s); }), HasSubstr("set_element(11) is out of range"));
  std::vector<std::int64_t> wrong(9);
  EXPECT_THAT(error_of([&] { v.copy_to_host(std::span<std::int64_t>{wrong}, s); }),
              HasSubstr("copy_to_host was given 9 elements; the vector has 10"));
  EXPECT_THAT(error_of([&] { v.resize(std::numeric_limits<std::size_t>::max() / 4, s); }),
              HasSubstr("device_vector::resize: 4611686018427387903 elements of 8 bytes overflow a 64-bit size"));
  EXPECT_EQ(v.size(), 10U);
  EXPECT_THAT(v.to_string(), HasSubstr("device_vector of 10 elements of 8 bytes"));
}

// A stream of another device is refused up front, naming the vector and the
// call made, not the buffer or event underneath; the vector keeps its elements.
TYPED_TEST(DeviceVector, AStreamOfAnotherDeviceIsRefusedNamingTheVectorAndTheCall) {
  SYNCMEM_REQUIRE_COUNT(2);
  stream s{this->dev(0)};
  stream other{this->dev(1)};
  std::vector<std::int32_t> host(1 + test::rng()() % 1000);
  for (auto& v : host) v = static_cast<std::int32_t>(test::rng()());
  device_vector<std::int32_t> v{host, s};
  std::vector<std::int32_t> out(host.size());
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"to_host", error_of([&] { (void)v.to_host(other); })},
      {"copy_to_host", error_of([&] { v.copy_to_host(std::span<std::int32_t>{out}, other); })},
      {"copy_from_host", error_of([&] { v.copy_from_host(std::span<const std::int32_t>{out}, other); })},
      {"element", error_of([&] { (void)v.element(0, other); })},
      {"set_element", error_of([&] { v.set_element(0, 1, other); })},
      {"resize", error_of([&] { v.resize(host.size() + 1, other); })},
      {"reserve", error_of([&] { v.reserve(host.size() + 1, other); })},
      {"shrink_to_fit", error_of([&] { v.shrink_to_fit(other); })},
      {"clone", error_of([&] { (void)v.clone(other); })},
  };
  for (const auto& [name, message] : calls) {
    EXPECT_THAT(message, ::testing::StartsWith("syncmem: device_vector (device_buffer of "));
    EXPECT_THAT(message, HasSubstr("): " + name + " was given a stream of " + to_string(this->dev(1)) +
                                   "; the vector's memory is in order on a stream of " + to_string(this->dev(0))));
  }
  EXPECT_EQ(v.size(), host.size());
  EXPECT_EQ(v.to_host(s), host);
}

}  // namespace
}  // namespace syncmem
