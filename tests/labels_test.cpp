// Allocation labels as the caching allocator keeps them: interned texts.
#include "mr/caching/labels.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace syncmem::mr::detail::caching {
namespace {

TEST(Labels, TheSameTextHasTheSameIdAndComesBack) {
  const auto a = intern_label("labels_test: weights");
  const auto b = intern_label("labels_test: activations");
  EXPECT_NE(a, no_label);
  EXPECT_NE(a, b);
  EXPECT_EQ(intern_label("labels_test: weights"), a);
  EXPECT_EQ(label_text(a), "labels_test: weights");
  EXPECT_EQ(label_text(b), "labels_test: activations");
  EXPECT_EQ(label_text(no_label), "");
  EXPECT_EQ(label_text(max_labels + 7), "");
}

TEST(Labels, TheCurrentLabelIsThisThreadsScopedLabel) {
  EXPECT_EQ(current_label_id(), no_label);
  {
    scoped_allocation_label outer{"labels_test: outer"};
    const auto outer_id = current_label_id();
    EXPECT_EQ(label_text(outer_id), "labels_test: outer");
    {
      scoped_allocation_label inner{"labels_test: inner"};
      EXPECT_EQ(label_text(current_label_id()), "labels_test: inner");
      std::thread other{[] { EXPECT_EQ(current_label_id(), no_label); }};
      other.join();
    }
    EXPECT_EQ(current_label_id(), outer_id);
  }
  EXPECT_EQ(current_label_id(), no_label);
}

TEST(Labels, PastTheLimitNewTextsShareTheOverflowLabel) {
  std::uint32_t last = no_label;
  for (std::uint32_t i = 0; i <= max_labels; ++i) last = intern_label("labels_test: many " + std::to_string(i));
  EXPECT_EQ(last, overflow_label);
  EXPECT_NE(label_text(overflow_label), "");
  EXPECT_EQ(label_text(intern_label("labels_test: weights")), "labels_test: weights");  // known texts keep their ids
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
