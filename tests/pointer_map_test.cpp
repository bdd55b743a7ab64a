// Live blocks by address: the open-addressing table against std::unordered_map
// over random inserts and erases, so that the backward-shift deletion keeps
// every other entry findable.
#include "mr/caching/pointer_map.hpp"

#include <gtest/gtest.h>

#include <unordered_map>
#include <vector>

#include "test_support.hpp"

namespace syncmem::mr::detail::caching {
namespace {

TEST(PointerMap, EraseReturnsTheBlockOnceAndNullptrWhenAbsent) {
  pointer_map map;
  block a;
  block b;
  EXPECT_EQ(map.erase(4096), nullptr);  // an empty table
  map.insert(4096, &a);
  map.insert(8192, &b);
  EXPECT_EQ(map.find(4096), &a);
  EXPECT_EQ(map.erase(4096), &a);
  EXPECT_EQ(map.erase(4096), nullptr);  // a second free of the same address
  EXPECT_EQ(map.find(4096), nullptr);
  EXPECT_EQ(map.find(8192), &b);
  EXPECT_EQ(map.size(), 1U);
}

TEST(PointerMap, AgreesWithAReferenceMapOverRandomInsertsAndErases) {
  std::vector<block> blocks(512);
  pointer_map map;
  std::unordered_map<std::uintptr_t, block*> reference;
  auto& rng = test::rng();
  // Addresses in a narrow span, so that their home slots collide and chains form.
  auto address = [&rng] { return (std::uintptr_t{1} << 32) + (rng() % 4096) * granule; };
  for (int step = 0; step < 200000; ++step) {
    const std::uintptr_t p = address();
    if (rng() % 3 != 0) {
      block* b = &blocks[rng() % blocks.size()];
      map.insert(p, b);
      reference[p] = b;
    } else {
      const auto it = reference.find(p);
      block* const expected = it == reference.end() ? nullptr : it->second;
      ASSERT_EQ(map.erase(p), expected) << "step " << step;
      if (it != reference.end()) reference.erase(it);
    }
    if (step % 1000 == 0) {
      ASSERT_EQ(map.size(), reference.size());
      for (const auto& [q, b] : reference) ASSERT_EQ(map.find(q), b) << "step " << step;
    }
  }
  std::size_t seen = 0;
  map.for_each([&](std::uintptr_t q, block* b) {
    ++seen;
    EXPECT_EQ(reference.at(q), b);
  });
  EXPECT_EQ(seen, reference.size());
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
