#pragma once

// A batch of copies (batch_copy.hpp) as batch_copy.cpp has checked, classified
// and coalesced it, and the part that carries it out (batch_execution.cpp):
// direct copies in few submissions (and the copy kernel), pageable ranges
// through pinned staging, paced as single staged copies are (staging_pacer).

#include <cstddef>
#include <vector>

#include "syncmem/copy.hpp"
#include "syncmem/stream.hpp"
#include "transfer/copy_internal.hpp"

namespace syncmem::detail {

// How one copy of a batch travels.
enum class route : unsigned char {
  host,    // host to host, by the host threads
  dma,     // straight to the device's copy engines (pinned, device, managed)
  up,      // from pageable memory, gathered into the staging
  down,    // to pageable memory, scattered from the staging
  single,  // between two devices: copy_async's own path
};

struct entry {
  std::byte* dst;
  const std::byte* src;
  std::size_t bytes;
  copy_side to;
  copy_side from;
  route how;
  std::size_t index;  // in the caller's list (the first, for coalesced copies)
};

// Carries out the copies of `entries` on `s`: each as its route says, those
// that need the host threads refused with unsupported_error, before anything
// is enqueued, where `captured` (the stream is being captured into a graph).
[[nodiscard]] transfer run_batch(std::vector<entry>& entries, stream_view s, const copy_options& o, bool captured);

}  // namespace syncmem::detail
