// The JSON form of an allocator snapshot (schema syncmem.snapshot/1).
#include "syncmem/mr/allocator_snapshot.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
  seg.stream = "0x0";
  seg.pool = "small";
  seg.blocks.push_back({0, 512, mr::block_state::allocated, 300, "weights", "0x0"});
  seg.blocks.push_back({512, 2096640, mr::block_state::free, 0, "", "0x0"});
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

TEST(AllocatorSnapshot, StatesAreSpelledOut) {
  EXPECT_EQ(mr::to_string(mr::block_state::allocated), "allocated");
  EXPECT_EQ(mr::to_string(mr::block_state::free), "free");
  EXPECT_EQ(mr::to_string(mr::block_state::pending), "pending");
}

TEST(AllocatorSnapshot, LabelsThatAreNotUtf8StillMakeJson) {
  mr::allocator_snapshot snap;
  mr::allocator_snapshot::segment seg;
  seg.blocks.push_back({0, 512, mr::block_state::allocated, 1, std::string{"bad \xff\xfe label"}, "0x0"});
  snap.segments.push_back(seg);
  const auto json = nlohmann::json::parse(snap.to_json());
  EXPECT_EQ(json["segments"][0]["blocks"][0]["state"], "allocated");
}

}  // namespace
}  // namespace syncmem
