// The JSON form of an allocator snapshot (schema syncmem.snapshot/1).
#include "syncmem/mr/allocator_snapshot.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>

#include <fmt/format.h>

#include "test_support.hpp"

namespace syncmem {
namespace {

TEST(AllocatorSnapshot, WritesTheSchema) {
  mr::allocator_snapshot snap;
  snap.device = "cuda:0";
  snap.resource = "caching_resource(cuda:0)";
  snap.captured_at = "2026-11-20T12:00:00Z";
  snap.reserved = 2097152;
  snap.allocated = 512;
  snap.free = 2096640;
  mr::allocator_snapshot::segment seg;
  seg.address = 0x7f0000000000;
  seg.size = 2097152;
  const stream_view legacy = detail::stream_access::make(device_id::cuda(0), stream_handle{});
  seg.stream = legacy;
  seg.pool = mr::segment_pool::small;
  seg.blocks.push_back({0, 512, mr::block_state::allocated, 300, "weights", legacy});
  seg.blocks.push_back({512, 2096640, mr::block_state::free, 0, "", legacy});
  snap.segments.push_back(seg);
  const auto json = nlohmann::json::parse(snap.to_json());
  const char* const expected = R"json({"format": "syncmem.snapshot/1", "device": "cuda:0",
      "resource": "caching_resource(cuda:0)", "captured_at": "2026-11-20T12:00:00Z",
      "totals": {"reserved": 2097152, "allocated": 512, "free": 2096640, "pending": 0},
      "segments": [{"address": "0x7f0000000000", "size": 2097152, "stream": "0x0", "pool": "small",
                    "blocks": [{"offset": 0, "size": 512, "state": "allocated", "requested": 300,
                                "label": "weights", "stream": "0x0"},
                               {"offset": 512, "size": 2096640, "state": "free", "requested": 0,
                                "label": "", "stream": "0x0"}]}]})json";
  EXPECT_EQ(json, nlohmann::json::parse(expected));
  EXPECT_EQ(snap.to_json().find('\n'), std::string::npos);
  EXPECT_NE(snap.to_json(2).find('\n'), std::string::npos);
}

// Streams and pools are typed; the JSON spells them: a handle in hexadecimal,
// "none" for no stream, the pool's name.
TEST(AllocatorSnapshot, StreamsAndPoolsAreWrittenOnlyInTheJson) {
  const auto handle = (test::rng()() | 1U) & ((std::uint64_t{1} << 47) - 1);  // random, never 0
  const stream_view s =
      detail::stream_access::make(device_id::emulated(1), stream_handle{static_cast<std::uintptr_t>(handle)});
  mr::allocator_snapshot snap;
  for (const auto pool : {mr::segment_pool::small, mr::segment_pool::large, mr::segment_pool::expandable}) {
    mr::allocator_snapshot::segment seg;
    seg.address = 0x7f0000000000 + snap.segments.size() * 0x200000;
    seg.size = 0x200000;
    seg.pool = pool;
    seg.stream = pool == mr::segment_pool::expandable ? std::nullopt : std::optional{s};
    seg.blocks.push_back({0, 1024, mr::block_state::allocated, 1000, "x", s});
    seg.blocks.push_back({1024, 0x200000 - 1024, mr::block_state::free, 0, "", std::nullopt});
    snap.segments.push_back(seg);
  }
  const auto json = nlohmann::json::parse(snap.to_json());
  const std::string hex = fmt::format("{:#x}", handle);
  ASSERT_EQ(json["segments"].size(), 3U);
  EXPECT_EQ(json["segments"][0]["pool"], "small");
  EXPECT_EQ(json["segments"][1]["pool"], "large");
  EXPECT_EQ(json["segments"][2]["pool"], "expandable");
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(json["segments"][i]["stream"], i == 2 ? "none" : hex) << i;
    EXPECT_EQ(json["segments"][i]["blocks"][0]["stream"], hex) << i;
    EXPECT_EQ(json["segments"][i]["blocks"][1]["stream"], "none") << i;
  }
}

TEST(AllocatorSnapshot, PoolsAreSpelledOut) {
  EXPECT_EQ(mr::to_string(mr::segment_pool::small), "small");
  EXPECT_EQ(mr::to_string(mr::segment_pool::large), "large");
  EXPECT_EQ(mr::to_string(mr::segment_pool::expandable), "expandable");
  EXPECT_EQ(mr::to_string(mr::segment_pool::graph), "graph");
}

TEST(AllocatorSnapshot, StatesAreSpelledOut) {
  EXPECT_EQ(mr::to_string(mr::block_state::allocated), "allocated");
  EXPECT_EQ(mr::to_string(mr::block_state::free), "free");
  EXPECT_EQ(mr::to_string(mr::block_state::pending), "pending");
}

TEST(AllocatorSnapshot, LabelsThatAreNotUtf8StillMakeJson) {
  mr::allocator_snapshot snap;
  mr::allocator_snapshot::segment seg;
  seg.blocks.push_back({0, 512, mr::block_state::allocated, 1, std::string{"bad \xff\xfe label"}, std::nullopt});
  snap.segments.push_back(seg);
  const auto json = nlohmann::json::parse(snap.to_json());
  EXPECT_EQ(json["segments"][0]["blocks"][0]["state"], "allocated");
}

}  // namespace
}  // namespace syncmem
