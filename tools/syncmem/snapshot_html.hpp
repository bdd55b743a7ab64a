#pragma once

// The page `syncmem view` writes: an allocator snapshot drawn like PyTorch's
// memory_viz, offline. Each segment is a bar; its blocks are coloured by state
// (allocated, pending = freed but waiting for a stream, free) and labelled;
// the totals, the memory per label and every block as a table.

#include <string>

#include "snapshot.hpp"

namespace syncmem::tool {

[[nodiscard]] std::string render_snapshot_html(const snapshot& s, const std::string& source);

}  // namespace syncmem::tool
