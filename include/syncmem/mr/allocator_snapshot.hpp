#pragma once

/// @file mr/allocator_snapshot.hpp
/// @brief What a caching allocator holds at one moment: its segments and the
/// blocks in them, and the JSON form `syncmem view` draws.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "syncmem/stream.hpp"

namespace syncmem::mr {

/// @brief The state of one block of a segment.
enum class block_state : std::uint8_t {
  allocated,  ///< handed out
  free,       ///< free for reuse
  pending,    ///< freed, waiting for streams recorded with record_stream
};

/// @brief "allocated", "free", "pending".
[[nodiscard]] std::string to_string(block_state state);

/// @brief Which pool of a caching allocator memory belongs to.
enum class segment_pool : std::uint8_t {
  small,       ///< segments shared by small requests
  large,       ///< segments sized to large requests
  expandable,  ///< the growable range (expandable segments)
  graph,       ///< a graph_pool's private pool: allocated during a stream capture (never in a snapshot)
};

/// @brief "small", "large", "expandable", "graph".
[[nodiscard]] std::string to_string(segment_pool pool);

/// @brief A snapshot of a caching allocator. Its JSON form (to_json) is the
/// schema `syncmem.snapshot/1`:
///
///     {"format": "syncmem.snapshot/1", "device": "cuda:0",
///      "resource": "caching_resource(cuda:0)", "captured_at": "2026-11-20T12:00:00Z",
///      "totals": {"reserved": 0, "allocated": 0, "free": 0, "pending": 0},
///      "segments": [{"address": "0x7f0000000000", "size": 2097152, "stream": "0x0",
///                    "pool": "small|large|expandable",
///                    "blocks": [{"offset": 0, "size": 512, "state": "allocated|free|pending",
///                                "requested": 300, "label": "weights", "stream": "0x0"}]}]}
///
/// In the JSON form, streams are native handles in hexadecimal, or "none" for
/// memory no stream holds (fresh memory, and memory whose stream was destroyed
/// after all its work completed): std::nullopt here. The blocks of a segment
/// tile it, in address order.
struct allocator_snapshot {
  struct block {
    std::size_t offset = 0;  ///< from the segment's address
    std::size_t size = 0;
    block_state state = block_state::free;
    std::size_t requested = 0;  ///< bytes asked for (allocated blocks; 0 otherwise)
    std::string label;          ///< the allocation label (allocated blocks)
    /// @brief allocated: the stream it was allocated on; else the stream it
    /// belongs to, or nullopt when none does
    std::optional<stream_view> stream;
  };
  struct segment {
    std::uintptr_t address = 0;
    std::size_t size = 0;
    std::optional<stream_view> stream;  ///< the stream it was first reserved for; nullopt: none (expandable)
    segment_pool pool = segment_pool::large;
    std::vector<block> blocks;
  };

  std::string device;             ///< "cuda:0"
  std::string resource;           ///< "caching_resource(cuda:0)"
  std::string captured_at;        ///< UTC, ISO 8601: "2026-11-20T12:00:00Z"
  std::size_t reserved = 0;       ///< bytes reserved from the device
  std::size_t allocated = 0;      ///< bytes in allocated blocks
  std::size_t free = 0;           ///< bytes in free blocks
  std::size_t pending = 0;        ///< bytes in pending blocks
  std::vector<segment> segments;  ///< in address order

  /// @brief The JSON form (schema above); `indent` < 0 writes one line.
  [[nodiscard]] std::string to_json(int indent = -1) const;
};

}  // namespace syncmem::mr
