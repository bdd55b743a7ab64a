#pragma once

/// @file mr/allocator_snapshot.hpp
/// @brief What a caching allocator holds at one moment: its segments and the
/// blocks in them, and the JSON form `syncmem view` draws.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace syncmem::mr {

/// @brief The state of one block of a segment.
enum class block_state : std::uint8_t {
  allocated,  ///< handed out
  free,       ///< free for reuse
  pending,    ///< freed, waiting for streams recorded with record_stream
};

/// @brief "allocated", "free", "pending".
[[nodiscard]] std::string to_string(block_state state);

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
/// Streams are native handles in hexadecimal, or "none" for memory no stream
/// holds (fresh memory, and memory whose stream was destroyed after all its
/// work completed). The blocks of a segment tile it, in address order.
struct allocator_snapshot {
  struct block {
    std::size_t offset = 0;  ///< from the segment's address
    std::size_t size = 0;
    block_state state = block_state::free;
    std::size_t requested = 0;  ///< bytes asked for (allocated blocks; 0 otherwise)
    std::string label;          ///< the allocation label (allocated blocks)
    std::string stream;         ///< allocated: the stream it was allocated on; else the stream it belongs to
  };
  struct segment {
    std::uintptr_t address = 0;
    std::size_t size = 0;
    std::string stream;  ///< the stream it was first reserved for
    std::string pool;    ///< "small", "large" or "expandable"
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
