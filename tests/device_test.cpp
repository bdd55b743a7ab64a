#include "syncmem/device.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_set>
#include <vector>

#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

TEST(DeviceId, ValueSemanticsAndNames) {
  constexpr auto a = device_id::cuda(1);
  static_assert(a.kind() == device_kind::cuda && a.index() == 1);
  EXPECT_EQ(to_string(a), "cuda:1");
  EXPECT_EQ(to_string(device_id::emulated(2)), "emulated:2");
  EXPECT_NE(device_id::cuda(0), device_id::emulated(0));
  EXPECT_LT(device_id::cuda(3), device_id::emulated(0));
  EXPECT_LT(device_id::emulated(0), device_id::emulated(1));
  EXPECT_NE(std::hash<device_id>{}(device_id::cuda(0)), std::hash<device_id>{}(device_id::emulated(0)));
}

TEST(DeviceId, HashIsDistinctForEveryKindAndIndex) {
  // Both kinds and a hypothetical third: the hash must not assume two.
  const auto third = static_cast<device_kind>(device_kind_count);
  std::unordered_set<std::size_t> seen;
  std::size_t pairs = 0;
  for (const device_kind kind : {device_kind::cuda, device_kind::emulated, third}) {
    for (int index = -8; index < 1024; ++index) {
      seen.insert(std::hash<device_id>{}(device_id{kind, index}));
      ++pairs;
    }
  }
  EXPECT_EQ(seen.size(), pairs);
}

TEST(DeviceKind, NamesParseBackAndKindsAreNumberedFromZero) {
  static_assert(device_kinds.size() == device_kind_count);
  for (std::size_t i = 0; i < device_kind_count; ++i) {
    EXPECT_EQ(static_cast<std::size_t>(device_kinds[i]), i);
    EXPECT_EQ(parse_device_kind(to_string(device_kinds[i])), device_kinds[i]);
  }
  EXPECT_EQ(to_string(device_kind::cuda), "cuda");
  EXPECT_EQ(to_string(device_kind::emulated), "emulated");
  EXPECT_EQ(parse_device_kind("cpu"), std::nullopt);
  EXPECT_EQ(parse_device_kind("CUDA"), std::nullopt);
  EXPECT_EQ(parse_device_kind(""), std::nullopt);
}

TEST(Devices, CountsAndEnumeration) {
  const int cuda = device_count(device_kind::cuda);
  const int emulated = device_count(device_kind::emulated);
  EXPECT_EQ(device_count(), cuda + emulated);
  EXPECT_EQ(emulated, test::emulated_test_devices);
  const auto all = devices();
  ASSERT_EQ(static_cast<int>(all.size()), cuda + emulated);
  for (int i = 0; i < cuda; ++i) EXPECT_EQ(all[static_cast<std::size_t>(i)], device_id::cuda(i));
  for (int i = 0; i < emulated; ++i) EXPECT_EQ(all[static_cast<std::size_t>(cuda + i)], device_id::emulated(i));
  if (cuda == 0) {
    EXPECT_FALSE(why_no_devices(device_kind::cuda).empty());
  }
  EXPECT_TRUE(why_no_devices(device_kind::emulated).empty());
}

TEST(Devices, InvalidIndexNamesTheValidRange) {
  try {
    check_device(device_id::emulated(7));
    FAIL() << "did not throw";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("device index 7 is out of range for emulated devices: valid indices are 0..2"));
  }
  EXPECT_THROW(check_device(device_id::emulated(-1)), logic_error);
  EXPECT_THROW(set_current_device(device_id::emulated(3)), logic_error);
  EXPECT_THROW((void)get_device_properties(device_id::emulated(3)), logic_error);
  EXPECT_THROW(device_guard{device_id::emulated(99)}, logic_error);
}

TEST(Devices, EmulatedDevicesCanBeAddedButNotRemoved) {
  auto options = emulated_device_options();
  const int before = options.device_count;
  options.device_count = before - 1;
  EXPECT_THROW(enable_emulated_devices(options), logic_error);
  options.device_count = 65;
  EXPECT_THROW(enable_emulated_devices(options), logic_error);
  EXPECT_EQ(device_count(device_kind::emulated), before);
}

TEST(Devices, CurrentDeviceDefaultsToCudaThenEmulated) {
  // A fresh thread has selected nothing.
  device_id seen{device_kind::emulated, -1};
  std::thread{[&] { seen = current_device(); }}.join();
  if (device_count(device_kind::cuda) > 0) {
    EXPECT_EQ(seen.kind(), device_kind::cuda);
  } else {
    EXPECT_EQ(seen, device_id::emulated(0));
  }
}

TEST(DeviceGuard, SwitchesRestoresAndNests) {
  std::thread{[] {
    const auto start = current_device();
    {
      device_guard outer{device_id::emulated(1)};
      EXPECT_EQ(current_device(), device_id::emulated(1));
      EXPECT_EQ(outer.original(), start);
      EXPECT_TRUE(outer.switched());
      {
        device_guard inner{device_id::emulated(2)};
        EXPECT_EQ(current_device(), device_id::emulated(2));
        EXPECT_EQ(inner.original(), device_id::emulated(1));
      }
      EXPECT_EQ(current_device(), device_id::emulated(1));
      {
        device_guard same{device_id::emulated(1)};
        EXPECT_FALSE(same.switched());
        EXPECT_EQ(current_device(), device_id::emulated(1));
      }
      EXPECT_EQ(current_device(), device_id::emulated(1));
    }
    EXPECT_EQ(current_device(), start);
  }}.join();
}

TEST(DeviceGuard, RestoresTheCurrentDeviceOfEveryKind) {
  // A few devices of each kind present: every pair, across kinds too.
  std::vector<device_id> some;
  for (const device_id d : devices()) {
    if (d.index() < 3) some.push_back(d);
  }
  for (const device_id from : some) {
    for (const device_id to : some) {
      std::thread{[&] {
        set_current_device(from);
        {
          device_guard guard{to};
          EXPECT_EQ(current_device(), to);
          EXPECT_EQ(guard.original(), from);
          EXPECT_EQ(guard.switched(), from != to);
        }
        EXPECT_EQ(current_device(), from) << "guard for " << to_string(to);
      }}.join();
    }
  }
}

TEST(DeviceGuard, RestoresTheDefaultWhenNothingWasSelected) {
  std::thread{[] {
    const device_id start = current_device();  // a fresh thread's default, selected by nobody
    for (const device_id d : devices()) {
      {
        device_guard guard{d};
        EXPECT_EQ(current_device(), d);
      }
      EXPECT_EQ(current_device(), start) << "guard for " << to_string(d);
    }
  }}.join();
}

TEST(DeviceGuard, GuardsInsideSeeADeviceSetInItsScope) {
  std::thread{[] {
    const auto start = current_device();
    {
      device_guard outer{device_id::emulated(1)};
      set_current_device(device_id::emulated(2));
      {
        device_guard inner{device_id::emulated(1)};
        EXPECT_TRUE(inner.switched());
        EXPECT_EQ(inner.original(), device_id::emulated(2));
        EXPECT_EQ(current_device(), device_id::emulated(1));
        {
          device_guard same{device_id::emulated(1)};
          EXPECT_FALSE(same.switched());
          EXPECT_EQ(same.original(), device_id::emulated(1));
        }
        EXPECT_EQ(current_device(), device_id::emulated(1));
      }
      EXPECT_EQ(current_device(), device_id::emulated(2));
      {
        device_guard again{device_id::emulated(1)};  // the outer guard's device is no longer current
        EXPECT_TRUE(again.switched());
        EXPECT_EQ(current_device(), device_id::emulated(1));
      }
      EXPECT_EQ(current_device(), device_id::emulated(2));
    }
    EXPECT_EQ(current_device(), start);
  }}.join();
}

TEST(DeviceGuard, RestoresWhenAnExceptionLeavesTheScope) {
  std::thread{[] {
    set_current_device(device_id::emulated(2));
    try {
      device_guard guard{device_id::emulated(0)};
      EXPECT_EQ(current_device(), device_id::emulated(0));
      throw std::runtime_error{"leave"};
    } catch (const std::runtime_error&) {}
    EXPECT_EQ(current_device(), device_id::emulated(2));
  }}.join();
}

TEST(DeviceGuard, CurrentDeviceIsPerThread) {
  std::thread{[] {
    set_current_device(device_id::emulated(1));
    std::thread{[] {
      const auto other = current_device();
      EXPECT_NE(other, device_id::emulated(1));
    }}.join();
    EXPECT_EQ(current_device(), device_id::emulated(1));
  }}.join();
}

TEST(DeviceGuard, MixedKindsRestoreCudaToo) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 1);
  std::thread{[] {
    set_current_device(device_id::cuda(0));
    {
      device_guard to_emulated{device_id::emulated(1)};
      EXPECT_EQ(current_device(), device_id::emulated(1));
      {
        device_guard back{device_id::cuda(0)};
        EXPECT_EQ(current_device(), device_id::cuda(0));
      }
      EXPECT_EQ(current_device(), device_id::emulated(1));
    }
    EXPECT_EQ(current_device(), device_id::cuda(0));
  }}.join();
}

template <class Kind>
class DeviceKinds : public test::device_test<Kind> {};
TYPED_TEST_SUITE(DeviceKinds, test::device_kinds, test::device_kind_names);

TYPED_TEST(DeviceKinds, PropertiesDescribeTheDevice) {
  for (int i = 0; i < this->count(); ++i) {
    const auto p = get_device_properties(this->dev(i));
    EXPECT_EQ(p.id, this->dev(i));
    EXPECT_FALSE(p.name.empty());
    EXPECT_GT(p.total_memory, 0U);
    EXPECT_GT(p.multiprocessors, 0);
    EXPECT_FALSE(p.link().empty());
    if (this->is_cuda()) {
      EXPECT_GE(p.compute_capability_major, 5);
      EXPECT_FALSE(p.pci_bus_id.empty());
    } else {
      EXPECT_TRUE(p.supports_virtual_memory);
    }
  }
}

TYPED_TEST(DeviceKinds, MemoryInfoIsConsistent) {
  const auto info = get_memory_info(this->dev());
  EXPECT_GT(info.total, 0U);
  EXPECT_LE(info.free, info.total);
  EXPECT_EQ(info.total, get_device_properties(this->dev()).total_memory);
}

TYPED_TEST(DeviceKinds, GuardSelectsEveryDeviceOfTheKind) {
  for (int i = 0; i < this->count(); ++i) {
    device_guard guard{this->dev(i)};
    EXPECT_EQ(current_device(), this->dev(i));
  }
}

TYPED_TEST(DeviceKinds, SynchronizeIdleDevice) { EXPECT_NO_THROW(synchronize_device(this->dev())); }

}  // namespace
}  // namespace syncmem
