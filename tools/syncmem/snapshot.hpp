#pragma once

// An allocator snapshot as the caching allocators write it (format
// "syncmem.snapshot/1"), read and checked for `syncmem view`:
//
//   {"format": "syncmem.snapshot/1", "device": "cuda:0",
//    "resource": "caching_resource(cuda:0)", "captured_at": "2026-11-20T12:00:00Z",
//    "totals": {"reserved": 0, "allocated": 0, "free": 0, "pending": 0},
//    "segments": [{"address": "0x7f0000000000", "size": 2097152, "stream": "0x0",
//                  "pool": "small|large|expandable",
//                  "blocks": [{"offset": 0, "size": 512, "state": "allocated|free|pending",
//                              "requested": 300, "label": "weights", "stream": "0x0"}]}]}
//
// Required: format, segments; a segment's address, size and blocks; a block's
// offset, size and state. Everything else is optional, and fields this
// version does not know are ignored.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "syncmem/mr/allocator_snapshot.hpp"

namespace syncmem::tool {

inline constexpr const char* snapshot_format = "syncmem.snapshot/1";

// The library's block states and their names, read back.
using mr::block_state;
using mr::to_string;

struct snapshot_block {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  block_state state = block_state::free;
  std::optional<std::uint64_t> requested;  // bytes asked for, when allocated
  std::string label;
  std::string stream;
};

struct snapshot_segment {
  std::string address;
  std::uint64_t size = 0;
  std::string stream;
  std::string pool;
  std::vector<snapshot_block> blocks;  // by offset
};

struct snapshot_totals {
  std::uint64_t reserved = 0;
  std::uint64_t allocated = 0;
  std::uint64_t free = 0;
  std::uint64_t pending = 0;
};

struct snapshot {
  std::string device;
  std::string resource;
  std::string captured_at;
  std::vector<snapshot_segment> segments;
  snapshot_totals totals;                   // added up from the segments
  std::optional<snapshot_totals> declared;  // as the file states them
  std::vector<std::string> warnings;        // inconsistencies that do not stop drawing
};

// Checks and reads a snapshot; `source` names the file in messages. Throws
// input_error saying where and what is wrong.
[[nodiscard]] snapshot snapshot_from_json(const nlohmann::json& document, const std::string& source);

// Reads the file `path`; throws input_error when it cannot be read or is not a snapshot.
[[nodiscard]] snapshot load_snapshot(const std::string& path);

}  // namespace syncmem::tool
