// elementwise.hpp: fill, iota, axpy and checksum on device memory, in stream
// order, checked element by element on the host; and the refusal of memory
// that is not the stream's device's. Typed over device kinds.
#include "syncmem/elementwise.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "syncmem/error.hpp"
#include "syncmem/synced_memory.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

template <class Kind>
class Elementwise : public test::device_test<Kind> {};
TYPED_TEST_SUITE(Elementwise, test::device_kinds, test::device_kind_names);

std::size_t random_count() { return 1 + test::rng()() % 5000; }

TYPED_TEST(Elementwise, FillSetsEveryElement) {
  stream s{this->dev()};
  const std::size_t n = random_count();
  synced_memory m{n * sizeof(std::uint64_t), this->dev()};
  const auto value = static_cast<std::uint64_t>(test::rng()());
  fill(m.mutable_device_span<std::uint64_t>(s), value, s);
  std::size_t wrong = 0;
  for (const std::uint64_t v : m.host_span<std::uint64_t>()) wrong += v == value ? 0 : 1;
  EXPECT_EQ(wrong, 0U);
  const auto small = static_cast<std::uint8_t>(test::rng()());
  fill(m.mutable_device_span<std::uint8_t>(s), small, s);
  wrong = 0;
  for (const std::uint8_t v : m.host_span<std::uint8_t>()) wrong += v == small ? 0 : 1;
  EXPECT_EQ(wrong, 0U);
}

TYPED_TEST(Elementwise, IotaCountsFromTheStart) {
  stream s{this->dev()};
  const std::size_t n = random_count();
  const auto start = static_cast<std::int64_t>(test::rng()() % 100000) - 50000;
  synced_memory m{n * 8, this->dev()};
  iota(m.mutable_device_span<std::int64_t>(s), start, s);
  const auto longs = m.host_span<std::int64_t>();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(longs[i], start + static_cast<std::int64_t>(i)) << i;
  iota(m.mutable_device_span<float>(s), start, s);
  const auto floats = m.host_span<float>();
  for (std::size_t i = 0; i < 2 * n; ++i)
    ASSERT_EQ(floats[i], static_cast<float>(start + static_cast<std::int64_t>(i)));
  iota(m.mutable_device_span<std::int32_t>(s), start, s);
  const auto ints = m.host_span<std::int32_t>();
  for (std::size_t i = 0; i < 2 * n; ++i) ASSERT_EQ(ints[i], start + static_cast<std::int64_t>(i));
  iota(m.mutable_device_span<double>(s), start, s);
  const auto doubles = m.host_span<double>();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(doubles[i], static_cast<double>(start + static_cast<std::int64_t>(i)));
}

TYPED_TEST(Elementwise, AxpyAddsAScaledVector) {
  stream s{this->dev()};
  const std::size_t n = random_count();
  synced_memory x{n * sizeof(float), this->dev()};
  synced_memory y{n * sizeof(float), this->dev()};
  std::vector<float> expected(n);
  const auto alpha = static_cast<float>(test::rng()() % 7) - 3.0F;
  auto hx = x.mutable_host_span<float>();
  auto hy = y.mutable_host_span<float>();
  for (std::size_t i = 0; i < n; ++i) {
    // Small whole numbers: exact in float whether or not the GPU fuses the multiply-add.
    hx[i] = static_cast<float>(test::rng()() % 1000) - 500.0F;
    hy[i] = static_cast<float>(test::rng()() % 1000) - 500.0F;
    expected[i] = hy[i] + alpha * hx[i];
  }
  axpy(alpha, x.device_span<float>(s), y.mutable_device_span<float>(s), s);
  const auto result = y.host_span<float>();
  EXPECT_EQ(std::memcmp(result.data(), expected.data(), n * sizeof(float)), 0);
  EXPECT_THAT(
      [&] {
        try {
          axpy(1.0F, x.device_span<float>(s).first(n - 1), y.mutable_device_span<float>(s), s);
        } catch (const logic_error& e) {
          return std::string{e.what()};
        }
        return std::string{"no error"};
      }(),
      HasSubstr("axpy: x has " + std::to_string(n - 1) + " elements and y has " + std::to_string(n)));
}

TYPED_TEST(Elementwise, TheDeviceChecksumIsTheHostChecksum) {
  stream s{this->dev()};
  const std::size_t bytes = 1 + test::rng()() % 100000;
  const auto data = test::random_bytes(bytes);
  synced_memory m{bytes, this->dev()};
  auto h = m.mutable_host_span<std::uint8_t>();
  std::memcpy(h.data(), data.data(), bytes);
  const std::uint64_t expected = host_checksum(data.data(), bytes);
  EXPECT_EQ(checksum(m.device_span<std::uint8_t>(s), s), expected);
  // Any one byte changed changes it.
  const std::size_t at = test::rng()() % bytes;
  auto w = m.mutable_host_span<std::uint8_t>();
  w[at] = static_cast<std::uint8_t>(w[at] ^ (1U + test::rng()() % 255));
  EXPECT_NE(checksum(m.device_span<std::uint8_t>(s), s), expected) << "byte " << at;
  EXPECT_EQ(checksum(m.device_span<std::uint8_t>(s), s), host_checksum(m.host_span<std::uint8_t>()));
  EXPECT_EQ(checksum(std::span<const std::uint8_t>{}, s), 0U);
}

TYPED_TEST(Elementwise, MemoryThatIsNotTheStreamsDevicesIsRefused) {
  stream s{this->dev()};
  std::vector<float> host(16);
  try {
    fill(std::span<float>{host}, 1.0F, s);
    FAIL() << "filled host memory as device memory";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fill: x (64 bytes at"));
    EXPECT_THAT(e.what(), HasSubstr("is pageable memory; it must be device memory of " + to_string(this->dev())));
  }
  EXPECT_EQ(host, std::vector<float>(16, 0.0F));
  SYNCMEM_REQUIRE_COUNT(2);
  synced_memory other{64, this->dev(1)};
  stream s1{this->dev(1)};
  EXPECT_THAT(
      [&] {
        try {
          iota(other.mutable_device_span<std::int32_t>(s1), 0, s);
        } catch (const logic_error& e) {
          return std::string{e.what()};
        }
        return std::string{"no error"};
      }(),
      HasSubstr("is device memory of " + to_string(this->dev(1)) + "; it must be device memory of " +
                to_string(this->dev(0))));
}

}  // namespace
}  // namespace syncmem
