// ctest-labels: threaded
// The source resources (device_resource and its kind-checked cuda and emulated
// forms, pageable, pinned) and the per-device default resource.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "resource_conformance.hpp"
#include "syncmem/mr/allocation_label.hpp"
#include "syncmem/mr/device_resource.hpp"
#include "syncmem/mr/pageable_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {

struct cuda_source : on_device<device_kind::cuda> {
  static std::unique_ptr<mr::memory_resource> make() { return std::make_unique<mr::cuda_resource>(device()); }
};
struct emulated_source : on_device<device_kind::emulated> {
  static std::unique_ptr<mr::memory_resource> make() { return std::make_unique<mr::emulated_resource>(device()); }
};
struct emulated_source_other_device : emulated_source {
  static device_id device() { return device_id::emulated(2); }
  static std::unique_ptr<mr::memory_resource> make() { return std::make_unique<mr::emulated_resource>(device()); }
};
struct device_source_any_kind : on_device<device_kind::emulated> {
  static std::unique_ptr<mr::memory_resource> make() { return std::make_unique<mr::device_resource>(device()); }
};
struct pageable_source : on_device<device_kind::emulated> {
  static std::unique_ptr<mr::memory_resource> make() { return std::make_unique<mr::pageable_resource>(); }
};
struct pinned_cuda_source : on_device<device_kind::cuda> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::pinned_resource>(device_kind::cuda);
  }
};
struct pinned_emulated_source : on_device<device_kind::emulated> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::pinned_resource>(device_kind::emulated, mr::pinned_flags{.write_combined = true});
  }
};

using sources = ::testing::Types<cuda_source, emulated_source, emulated_source_other_device, device_source_any_kind,
                                 pageable_source, pinned_cuda_source, pinned_emulated_source>;
INSTANTIATE_TYPED_TEST_SUITE_P(sources, resource_conformance, sources);

namespace {

TEST(Sources, KindsAndDevices) {
  mr::emulated_resource e{device_id::emulated(1)};
  EXPECT_EQ(e.kind(), memory_kind::device);
  EXPECT_EQ(e.device(), device_id::emulated(1));
  EXPECT_EQ(e.name(), "emulated_resource(emulated:1)");
  mr::pageable_resource p;
  EXPECT_EQ(p.kind(), memory_kind::pageable_host);
  EXPECT_FALSE(p.device().has_value());
  mr::pinned_resource pinned{device_kind::emulated};
  EXPECT_EQ(pinned.kind(), memory_kind::pinned_host);
  void* h = pinned.allocate(100, default_stream(device_id::emulated(0)));
  EXPECT_EQ(get_pointer_attributes(h).kind, memory_kind::pinned_host);
  pinned.deallocate(h, 100, default_stream(device_id::emulated(0)));
  EXPECT_TRUE(e.is_equal(mr::emulated_resource{device_id::emulated(1)}));
  EXPECT_FALSE(e.is_equal(mr::emulated_resource{device_id::emulated(0)}));
  EXPECT_FALSE(e.is_equal(p));
  // One implementation behind both names: the same device's memory is the same source.
  mr::device_resource any{device_id::emulated(1)};
  EXPECT_EQ(any.name(), "device_resource(emulated:1)");
  EXPECT_TRUE(any.is_equal(e));
  EXPECT_TRUE(e.is_equal(any));
  EXPECT_FALSE(any.is_equal(mr::device_resource{device_id::emulated(0)}));
}

TEST(Sources, RefuseDevicesOfTheWrongKind) {
  EXPECT_THROW(mr::emulated_resource{device_id::cuda(0)}, logic_error);
  EXPECT_THROW(mr::cuda_resource{device_id::emulated(0)}, logic_error);
  EXPECT_THROW(mr::emulated_resource{device_id::emulated(9)}, logic_error);
  EXPECT_THROW(mr::device_resource{device_id::emulated(9)}, logic_error);
  if (device_count(device_kind::cuda) == 0) {
    EXPECT_THROW(mr::pinned_resource{device_kind::cuda}, unsupported_error);
  }
}

TEST(Sources, OutOfMemoryNamesSizeDeviceLabelAndFreeMemory) {
  mr::emulated_resource e{device_id::emulated(2)};
  const auto total = get_memory_info(device_id::emulated(2)).total;
  mr::scoped_allocation_label label{"giant activations"};
  try {
    (void)e.allocate(total * 2, default_stream(device_id::emulated(2)));
    FAIL() << "did not throw";
  } catch (const out_of_memory& oom) {
    EXPECT_EQ(oom.info().requested, total * 2);
    EXPECT_EQ(oom.info().device, device_id::emulated(2));
    EXPECT_EQ(oom.info().label, "giant activations");
    EXPECT_EQ(oom.info().device_total, total);
    EXPECT_TRUE(oom.info().device_free.has_value());
    EXPECT_THAT(oom.what(), HasSubstr("emulated_resource(emulated:2)"));
    EXPECT_THAT(oom.what(), HasSubstr("'giant activations'"));
  }
}

TEST(AllocationLabel, NestsAndIsPerThread) {
  EXPECT_EQ(mr::current_allocation_label(), "");
  {
    mr::scoped_allocation_label outer{"outer"};
    {
      mr::scoped_allocation_label inner{"inner"};
      EXPECT_EQ(mr::current_allocation_label(), "inner");
      std::thread{[] { EXPECT_EQ(mr::current_allocation_label(), ""); }}.join();
    }
    EXPECT_EQ(mr::current_allocation_label(), "outer");
  }
  EXPECT_EQ(mr::current_allocation_label(), "");
}

TEST(PerDeviceResource, DefaultsAndReplacement) {
  const auto d = device_id::emulated(1);
  auto& built_in = mr::get_per_device_resource(d);
  EXPECT_EQ(built_in.device(), d);
  EXPECT_EQ(&mr::get_per_device_resource(d), &built_in);
  mr::emulated_resource mine{d};
  EXPECT_EQ(mr::set_per_device_resource(d, &mine), &built_in);
  EXPECT_EQ(&mr::get_per_device_resource(d), &mine);
  mr::emulated_resource wrong{device_id::emulated(0)};
  EXPECT_THROW(mr::set_per_device_resource(d, &wrong), logic_error);
  mr::pageable_resource host;
  EXPECT_THROW(mr::set_per_device_resource(d, &host), logic_error);
  EXPECT_EQ(mr::set_per_device_resource(d, nullptr), &mine);
  EXPECT_EQ(&mr::get_per_device_resource(d), &built_in);
  EXPECT_THROW((void)mr::get_per_device_resource(device_id::emulated(5)), logic_error);
}

TEST(PerDeviceResource, CurrentDeviceResourceFollowsTheGuard) {
  device_guard guard{device_id::emulated(2)};
  EXPECT_EQ(mr::get_current_device_resource().device(), device_id::emulated(2));
}

}  // namespace
}  // namespace syncmem::test
