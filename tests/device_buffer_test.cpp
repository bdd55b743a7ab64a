// device_buffer: contents kept through copies, resizes and moves, checked byte
// by byte with fresh random data; nothing changed by a failed allocation;
// errors that name the buffer; memory given back to the resource.
#include "syncmem/device_buffer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "syncmem/error.hpp"
#include "syncmem/mr/failure_adaptor.hpp"
#include "syncmem/mr/pageable_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/statistics_adaptor.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

template <class Kind>
class DeviceBuffer : public test::device_test<Kind> {};
TYPED_TEST_SUITE(DeviceBuffer, test::device_kinds, test::device_kind_names);

std::vector<std::uint8_t> read_back(const device_buffer& b, stream_view s, std::size_t bytes) {
  std::vector<std::uint8_t> out(bytes);
  b.copy_to_host(out.data(), bytes, s);
  return out;
}

TYPED_TEST(DeviceBuffer, HoldsWhatWasCopiedIn) {
  stream s{this->dev()};
  const std::size_t bytes = 1 + test::rng()() % 300000;
  const auto data = test::random_bytes(bytes);
  device_buffer b{data.data(), bytes, s};
  EXPECT_EQ(b.size(), bytes);
  EXPECT_EQ(get_pointer_attributes(b.data()).kind, memory_kind::device);
  EXPECT_EQ(read_back(b, s, bytes), data);
  // Part of it, at an offset, from and to any host memory.
  const std::size_t offset = test::rng()() % bytes;
  const auto more = test::random_bytes(bytes - offset);
  b.copy_from_host(more.data(), more.size(), s, offset);
  std::vector<std::uint8_t> expected = data;
  std::copy(more.begin(), more.end(), expected.begin() + static_cast<std::ptrdiff_t>(offset));
  EXPECT_EQ(read_back(b, s, bytes), expected);
  device_buffer copy = b.clone(s);
  EXPECT_NE(copy.data(), b.data());
  EXPECT_EQ(read_back(copy, s, bytes), expected);
}

TYPED_TEST(DeviceBuffer, ResizeKeepsTheContentsAndReallocatesOnlyPastCapacity) {
  stream s{this->dev()};
  stream other{this->dev()};  // made before the buffer, which ends up freeing on it
  const std::size_t bytes = 1000 + test::rng()() % 100000;
  const auto data = test::random_bytes(bytes);
  device_buffer b{data.data(), bytes, s};
  const void* p = b.data();
  b.resize(bytes / 2, s);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.capacity(), bytes);
  b.resize(bytes, s);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(read_back(b, s, bytes), data);
  b.resize(bytes * 3, s);
  EXPECT_EQ(b.size(), bytes * 3);
  EXPECT_EQ(read_back(b, s, bytes), data);
  b.resize(bytes / 3, s);
  b.shrink_to_fit(s);
  EXPECT_EQ(b.capacity(), bytes / 3);
  EXPECT_EQ(read_back(b, s, bytes / 3), std::vector<std::uint8_t>(data.begin(), data.begin() + bytes / 3));
  b.reserve(bytes * 2, s);
  EXPECT_EQ(b.size(), bytes / 3);
  EXPECT_EQ(read_back(b, s, bytes / 3), std::vector<std::uint8_t>(data.begin(), data.begin() + bytes / 3));
  // Another stream: ordered after the first, the contents are there.
  b.resize(bytes * 4, other);
  EXPECT_EQ(b.stream()->handle(), other.view().handle());
  EXPECT_EQ(read_back(b, other, bytes / 3), std::vector<std::uint8_t>(data.begin(), data.begin() + bytes / 3));
}

TYPED_TEST(DeviceBuffer, AFailedGrowthChangesNothing) {
  stream s{this->dev()};
  mr::failure_adaptor failing{mr::get_per_device_resource(this->dev())};
  const std::size_t bytes = 1 + test::rng()() % 10000;
  const auto data = test::random_bytes(bytes);
  device_buffer b{data.data(), bytes, s, &failing};
  const void* p = b.data();
  failing.set_predicate(mr::failure_adaptor::always());
  EXPECT_THROW(b.resize(bytes * 2, s), out_of_memory);
  EXPECT_THROW(b.reserve(bytes * 2, s), out_of_memory);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), bytes);
  EXPECT_EQ(b.capacity(), bytes);
  failing.set_predicate({});
  EXPECT_EQ(read_back(b, s, bytes), data);
}

TYPED_TEST(DeviceBuffer, MovesAndDestructionGiveTheMemoryBack) {
  stream s{this->dev()};
  mr::statistics_adaptor counted{mr::get_per_device_resource(this->dev())};
  {
    device_buffer a{4096, s, &counted};
    EXPECT_EQ(counted.statistics().allocations.current, 1);
    device_buffer b{std::move(a)};
    EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): a moved-from buffer is empty
    EXPECT_EQ(a.size(), 0U);
    device_buffer c{100, s, &counted};
    c = std::move(b);
    EXPECT_EQ(counted.statistics().allocations.current, 1);
    EXPECT_EQ(c.size(), 4096U);
    EXPECT_EQ(c.memory_resource(), &counted);
  }
  EXPECT_EQ(counted.statistics().allocations.current, 0);
  EXPECT_EQ(counted.statistics().bytes.current, 0);
}

TYPED_TEST(DeviceBuffer, RangesOutsideTheBufferAreRefusedNamingIt) {
  stream s{this->dev()};
  device_buffer b{64, s};
  std::vector<std::uint8_t> host(100);
  try {
    b.copy_from_host(host.data(), 10, s, 60);
    FAIL() << "copied past the end";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("device_buffer of 64 B from "));
    EXPECT_THAT(e.what(), HasSubstr("copy_from_host of 10 bytes at offset 60 is out of range: it needs offset + bytes "
                                    "<= 64"));
  }
  EXPECT_THROW(b.copy_to_host(host.data(), 65, s), logic_error);
  EXPECT_THROW(b.copy_to_host(host.data(), 1, s, std::size_t{1} << 63), logic_error);
  EXPECT_THROW((device_buffer{nullptr, 8, s}), logic_error);
  EXPECT_THAT(b.to_string(), HasSubstr("device_buffer of 64 B"));
}

// A stream of another device is refused up front, naming the buffer and the
// call, not the event underneath; the buffer keeps its bytes.
TYPED_TEST(DeviceBuffer, AStreamOfAnotherDeviceIsRefusedNamingTheBufferAndTheCall) {
  SYNCMEM_REQUIRE_COUNT(2);
  stream s{this->dev(0)};
  stream other{this->dev(1)};
  const auto data = test::random_bytes(1 + test::rng()() % 5000);
  device_buffer b{data.data(), data.size(), s};
  std::vector<std::uint8_t> out(data.size());
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"copy_to_host", test::error_of([&] { b.copy_to_host(out.data(), out.size(), other); })},
      {"copy_from_host", test::error_of([&] { b.copy_from_host(out.data(), out.size(), other); })},
      {"resize", test::error_of([&] { b.resize(data.size() + 1, other); })},
      {"reserve", test::error_of([&] { b.reserve(data.size() + 1, other); })},
      {"shrink_to_fit", test::error_of([&] { b.shrink_to_fit(other); })},
      {"clone", test::error_of([&] { (void)b.clone(other); })},
  };
  for (const auto& [name, message] : calls) {
    EXPECT_THAT(message, ::testing::StartsWith("syncmem: device_buffer of "));
    EXPECT_THAT(message, HasSubstr(": " + name + " was given a stream of " + to_string(this->dev(1)) +
                                   "; the buffer's memory is in order on a stream of " + to_string(this->dev(0))));
  }
  ASSERT_EQ(b.size(), data.size());
  b.copy_to_host(out.data(), out.size(), s);
  EXPECT_EQ(out, data);
}

TEST(DeviceBufferAnyResource, WorksOnHostMemoryToo) {
  stream s{device_id::emulated(0)};
  mr::pageable_resource host;
  const auto data = test::random_bytes(1 + test::rng()() % 5000);
  device_buffer b{data.data(), data.size(), s, &host};
  EXPECT_EQ(get_pointer_attributes(b.data()).kind, memory_kind::pageable_host);
  EXPECT_EQ(std::memcmp(b.data(), data.data(), data.size()), 0);
  device_buffer empty;
  EXPECT_TRUE(empty.is_empty());
  EXPECT_FALSE(empty.stream().has_value());
  empty.resize(16, s);
  EXPECT_EQ(empty.size(), 16U);
}

}  // namespace
}  // namespace syncmem
