// The snapshot of a caching allocator, from made-up bookkeeping.
#include "mr/caching/caching_snapshot.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "mr/caching/labels.hpp"

namespace syncmem::mr::detail::caching {
namespace {

stream_handle fake_stream(std::uintptr_t n) { return stream_handle{n * 64}; }

class caching_snapshot_test : public ::testing::Test {
 protected:
  // Appends a block of `size` to `seg`.
  block* add(segment& seg, std::size_t size, block_status status, stream_pool* owner = nullptr) {
    block* b = store_.make();
    b->ptr = seg.base + used_[&seg];
    b->size = size;
    b->seg = &seg;
    b->status = status;
    b->owner = owner;
    used_[&seg] += size;
    if (seg.first == nullptr) {
      seg.first = b;
    } else {
      block* last = seg.first;
      while (last->next != nullptr) last = last->next;
      link_after(last, b);
    }
    return b;
  }

  block_store store_;
  std::map<const segment*, std::size_t> used_;
};

TEST_F(caching_snapshot_test, SegmentsInAddressOrderWithTheirBlocks) {
  stream_pool pool;
  pool.stream = fake_stream(5);
  device_segments::segment_map segments;
  auto high = std::make_unique<segment>(segment{0x40000000, 4096, pool_kind::large, false, fake_stream(5), nullptr});
  auto low = std::make_unique<segment>(segment{0x10000000, 2048, pool_kind::small, false, fake_stream(5), nullptr});
  block* used = add(*low, 1024, block_status::allocated);
  used->requested.store(1000);
  used->label.store(intern_label("caching_snapshot_test: weights"));
  used->stream.store(fake_stream(5));
  add(*low, 1024, block_status::free, &pool);
  add(*high, 4096, block_status::pending, &pool);
  segments.emplace(high->base, std::move(high));
  segments.emplace(low->base, std::move(low));
  const auto snap =
      take_snapshot({device_id::emulated(1), "emulated:1", "caching_resource(emulated:1)", 6144, &segments, nullptr});
  EXPECT_EQ(snap.device, "emulated:1");
  EXPECT_EQ(snap.reserved, 6144U);
  EXPECT_EQ(snap.allocated, 1024U);
  EXPECT_EQ(snap.free, 1024U);
  EXPECT_EQ(snap.pending, 4096U);
  EXPECT_FALSE(snap.captured_at.empty());
  ASSERT_EQ(snap.segments.size(), 2U);
  EXPECT_EQ(snap.segments[0].address, 0x10000000U);
  EXPECT_EQ(snap.segments[0].pool, segment_pool::small);
  EXPECT_EQ(snap.segments[1].pool, segment_pool::large);
  const stream_view five = syncmem::detail::stream_access::make(device_id::emulated(1), fake_stream(5));
  EXPECT_EQ(snap.segments[0].stream, five) << "a segment names the stream it was reserved for, on its device";
  ASSERT_EQ(snap.segments[0].blocks.size(), 2U);
  const auto& first = snap.segments[0].blocks[0];
  EXPECT_EQ(first.state, block_state::allocated);
  EXPECT_EQ(first.requested, 1000U);
  EXPECT_EQ(first.label, "caching_snapshot_test: weights");
  EXPECT_EQ(first.stream, five);
  EXPECT_EQ(snap.segments[0].blocks[1].offset, 1024U);
  EXPECT_EQ(snap.segments[0].blocks[1].stream, five);
  EXPECT_EQ(snap.segments[1].blocks[0].stream, five);
  EXPECT_EQ(snap.segments[1].blocks[0].state, block_state::pending);
}

TEST_F(caching_snapshot_test, EachRunOfMappedPagesOfTheGrowableRangeIsASegment) {
  stream_pool retired;
  retired.kind = stream_pool::role::retired;
  segment range{0x80000000, 10 << 20, pool_kind::large, true, stream_handle{}, nullptr};
  add(range, 2 << 20, block_status::free, &retired);
  add(range, 2 << 20, block_status::allocated);
  add(range, 4 << 20, block_status::unmapped);
  add(range, 2 << 20, block_status::free, &retired);
  const auto snap = take_snapshot({device_id::emulated(0), "emulated:0", "r", 6 << 20, nullptr, &range});
  ASSERT_EQ(snap.segments.size(), 2U);
  EXPECT_EQ(snap.segments[0].pool, segment_pool::expandable);
  EXPECT_EQ(snap.segments[1].pool, segment_pool::expandable);
  EXPECT_EQ(snap.segments[0].stream, std::nullopt) << "the growable range is no stream's";
  EXPECT_EQ(snap.segments[0].size, std::size_t{4} << 20);
  ASSERT_EQ(snap.segments[0].blocks.size(), 2U);
  EXPECT_EQ(snap.segments[0].blocks[0].stream, std::nullopt) << "a retired pool has no stream";
  EXPECT_EQ(snap.segments[1].address, 0x80000000U + (8 << 20));
  EXPECT_EQ(snap.segments[1].blocks[0].offset, 0U);
  EXPECT_EQ(snap.free, std::size_t{4} << 20);
  EXPECT_EQ(snap.allocated, std::size_t{2} << 20);
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
