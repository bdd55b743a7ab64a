// Registered memory: a caller's range pinned for a scope.
#include "syncmem/mr/registered_memory.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {
namespace {

template <class Kind>
class RegisteredMemory : public device_test<Kind> {};
TYPED_TEST_SUITE(RegisteredMemory, device_kinds, device_kind_names);

TYPED_TEST(RegisteredMemory, PinsTheRangeForItsLifetime) {
  auto bytes = random_bytes(3 * 4096 + 123);
  {
    mr::registered_memory r{bytes.data(), bytes.size(), this->kind};
    EXPECT_FALSE(r.empty());
    EXPECT_EQ(r.data(), bytes.data());
    EXPECT_EQ(r.size(), bytes.size());
    EXPECT_EQ(r.backend(), this->kind);
    EXPECT_TRUE(r.flags().portable);
    EXPECT_EQ(get_pointer_attributes(bytes.data()).kind, memory_kind::pinned_host);
    EXPECT_EQ(get_pointer_attributes(bytes.data() + bytes.size() - 1).kind, memory_kind::pinned_host);
  }
  EXPECT_EQ(get_pointer_attributes(bytes.data()).kind, memory_kind::pageable_host);
}

TYPED_TEST(RegisteredMemory, MovesOwnership) {
  std::vector<std::uint8_t> bytes(8192);
  mr::registered_memory a{bytes.data(), bytes.size(), this->kind, {.portable = true, .mapped = false}};
  mr::registered_memory b{std::move(a)};
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(b.data(), bytes.data());
  mr::registered_memory c;
  EXPECT_TRUE(c.empty());
  c = std::move(b);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(get_pointer_attributes(bytes.data()).kind, memory_kind::pinned_host);
  c.reset();
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(get_pointer_attributes(bytes.data()).kind, memory_kind::pageable_host);
  c.reset();  // twice is nothing
}

TYPED_TEST(RegisteredMemory, RefusesEmptyAndNullRanges) {
  std::vector<std::uint8_t> bytes(100);
  try {
    mr::registered_memory r{nullptr, 100, this->kind};
    FAIL() << "did not throw";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("data is null"));
  }
  try {
    mr::registered_memory r{bytes.data(), 0, this->kind};
    FAIL() << "did not throw";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("size is 0"));
  }
}

TYPED_TEST(RegisteredMemory, RefusesRangesAlreadyPinnedOrRegistered) {
  std::vector<std::uint8_t> bytes(4 * 4096);
  mr::registered_memory first{bytes.data() + 4096, 4096, this->kind};
  for (auto [offset, size] : {std::pair<std::size_t, std::size_t>{4096, 4096},
                              {4096 + 100, 10},
                              {0, 4097},
                              {0, bytes.size()},
                              {2 * 4096 - 1, 4096}}) {
    try {
      mr::registered_memory again{bytes.data() + offset, size, this->kind};
      FAIL() << "registered [" << offset << ", +" << size << ") twice";
    } catch (const logic_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("registered"));
    }
  }
  mr::pinned_resource pinned{this->kind};
  void* p = pinned.allocate(4096, default_stream(this->dev()));
  EXPECT_THROW((mr::registered_memory{p, 4096, this->kind}), logic_error);
  pinned.deallocate(p, 4096, default_stream(this->dev()));

  void* d = mr::get_per_device_resource(this->dev()).allocate(4096, default_stream(this->dev()));
  try {
    mr::registered_memory r{d, 4096, this->kind};
    FAIL() << "registered device memory";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("device memory"));
  }
  mr::get_per_device_resource(this->dev()).deallocate(d, 4096, default_stream(this->dev()));
  EXPECT_EQ(get_pointer_attributes(bytes.data() + 4096).kind, memory_kind::pinned_host);  // the first stands
}

TEST(RegisteredMemoryBackends, WithoutDevicesOfTheKindItIsUnsupported) {
  if (device_count(device_kind::cuda) > 0) GTEST_SKIP() << "this machine has CUDA devices";
  std::vector<std::uint8_t> bytes(100);
  EXPECT_THROW((mr::registered_memory{bytes.data(), bytes.size(), device_kind::cuda}), unsupported_error);
}

}  // namespace
}  // namespace syncmem::test
