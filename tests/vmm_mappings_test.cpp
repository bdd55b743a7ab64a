// vmm_mappings: which physical allocations back a range of reserved address
// space, in order, and a clear error where part of the range is not mapped.
#include "backend/vmm_mappings.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "syncmem/error.hpp"
#include "test_support.hpp"

namespace syncmem::detail {
namespace {

using ::testing::HasSubstr;

const void* at(std::uintptr_t a) { return reinterpret_cast<const void*>(a); }  // NOLINT(performance-no-int-to-ptr)

TEST(VmmMappings, PiecesCoverARangeInOrder) {
  vmm_mappings m;
  const std::uintptr_t base = 0x7f0000000000;
  const std::size_t page = std::size_t{2} << 20;
  m.reserved(at(base), 64 * page);
  // Pages of random sizes (1-4 pages each), mapped out of order.
  std::vector<vmm_mappings::piece> pieces;
  std::uintptr_t next = base;
  for (physical_handle h = 1; h <= 12; ++h) {
    const std::size_t size = (1 + test::rng()() % 4) * page;
    pieces.push_back({next, size, h});
    next += size;
  }
  for (std::size_t i = 0; i < pieces.size(); i += 2) m.mapped(at(pieces[i].address), pieces[i].size, pieces[i].handle);
  for (std::size_t i = 1; i < pieces.size(); i += 2) m.mapped(at(pieces[i].address), pieces[i].size, pieces[i].handle);
  EXPECT_TRUE(m.in_reserved(at(base + 5)));
  EXPECT_FALSE(m.in_reserved(at(base + 64 * page)));
  EXPECT_FALSE(m.in_reserved(at(base - 1)));
  // A range from inside piece 3 to inside piece 8.
  const std::uintptr_t start = pieces[3].address + 1 + test::rng()() % (pieces[3].size - 1);
  const std::uintptr_t end = pieces[8].address + 1 + test::rng()() % (pieces[8].size - 1);
  const auto got = m.pieces(at(start), end - start);
  ASSERT_EQ(got.size(), 6u);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].address, pieces[3 + i].address);
    EXPECT_EQ(got[i].size, pieces[3 + i].size);
    EXPECT_EQ(got[i].handle, pieces[3 + i].handle);
  }
  // A hole: piece 5 unmapped.
  m.unmapped(at(pieces[5].address), pieces[5].size);
  EXPECT_THAT(test::error_of([&] { return m.pieces(at(start), end - start); }),
              HasSubstr("is not all mapped memory of the growable range"));
  EXPECT_EQ(m.pieces(at(pieces[6].address), pieces[6].size).size(), 1u);
  // Unmapping a stretch forgets every mapping that starts in it.
  m.unmapped(at(pieces[0].address), pieces[4].address + pieces[4].size - pieces[0].address);
  EXPECT_THAT(test::error_of([&] { return m.pieces(at(pieces[2].address), 1); }), HasSubstr("is not all mapped"));
  m.freed(at(base));
  EXPECT_FALSE(m.in_reserved(at(base + 5)));
}

}  // namespace
}  // namespace syncmem::detail
