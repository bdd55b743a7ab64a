#pragma once

// What holds device memory for this process and can give it back when asked
// (the exports whose importers have closed them or exited): an allocation
// that would fail for lack of memory runs the reclaimers, outside its
// resource's lock, and tries once more before it fails, as PyTorch's
// allocator runs its free-memory callbacks (CudaIPCCollect among them).

#include <atomic>
#include <cstddef>
#include <functional>

namespace syncmem::detail {

// Returns how many things it let go.
using reclaimer = std::function<std::size_t()>;

// Adds a reclaimer for the rest of the process.
void add_reclaimer(reclaimer r);

inline std::atomic<int> reclaimers_added{0};
[[nodiscard]] inline bool reclaimers_exist() noexcept { return reclaimers_added.load(std::memory_order_acquire) > 0; }

// Runs every reclaimer; how many things they let go in all. A reclaimer that
// throws counts for nothing.
std::size_t run_reclaimers() noexcept;

}  // namespace syncmem::detail
