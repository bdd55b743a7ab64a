// Out of memory and back: fill a device through its default resource until it
// refuses, check that the error names the sizes, free everything, and carry on
// working (allocations, copies and synced_memory on the same device).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/synced_memory.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

template <class Kind>
class OutOfMemory : public test::device_test<Kind> {};
TYPED_TEST_SUITE(OutOfMemory, test::device_kinds, test::device_kind_names);

TYPED_TEST(OutOfMemory, FillTheDeviceFreeAndCarryOn) {
  const auto device = this->dev(this->count() - 1);
  auto& resource = mr::get_per_device_resource(device);
  auto s = default_stream(device);
  const std::size_t total = get_memory_info(device).total;
  // Blocks of about 1/32 of the device: the last one that fits leaves less than that.
  const std::size_t block = std::max<std::size_t>(total / 32, std::size_t{1} << 20);
  std::vector<void*> held;
  std::string message;
  oom_info info;
  {
    mr::scoped_allocation_label label{"filler"};
    for (std::size_t i = 0; i < 64 * 4; ++i) {
      try {
        held.push_back(resource.allocate(block, s));
      } catch (const out_of_memory& e) {
        message = e.what();
        info = e.info();
        break;
      }
    }
  }
  ASSERT_FALSE(message.empty()) << "the device never ran out after " << held.size() << " blocks";
  EXPECT_GT(held.size(), 16U);
  EXPECT_EQ(info.requested, block);
  EXPECT_EQ(info.device, device);
  EXPECT_EQ(info.label, "filler");
  EXPECT_THAT(message, HasSubstr(detail::format_bytes(block)));
  EXPECT_THAT(message, HasSubstr(to_string(device)));
  EXPECT_TRUE(info.device_free.has_value() || info.reserved.has_value()) << message;

  // A buffer cannot get its memory either, and says so with its label.
  synced_memory starved{block, device, {.label = "starved"}};
  try {
    (void)starved.mutable_device_data();
    FAIL() << "a buffer got memory on a full device";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.info().label, "starved");
  }
  EXPECT_EQ(starved.state(), sync_state::uninitialized);

  for (void* p : held) resource.deallocate(p, block, s);
  held.clear();

  // Carry on: the same sizes again, with contents checked.
  const auto seed = test::fresh_seed();
  void* again = resource.allocate(block, s);
  test::device_fill_pattern(s, again, 4096, seed);
  std::vector<std::uint8_t> back(4096);
  copy(back.data(), again, back.size(), s);
  for (std::size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], test::pattern_byte(seed, i));
  resource.deallocate(again, block, s);
  auto* host = static_cast<std::uint8_t*>(starved.mutable_host_data());
  for (std::size_t i = 0; i < 4096; ++i) host[i] = test::pattern_byte(seed, i);
  (void)starved.device_data();
  starved.resize(4096);
  (void)starved.mutable_device_data();
  const auto* h = static_cast<const std::uint8_t*>(starved.host_data());
  for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(h[i], test::pattern_byte(seed, i));
}

}  // namespace
}  // namespace syncmem
