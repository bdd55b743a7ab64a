// Placeholder until the synced_memory suite lands (it registers nothing yet).
#include "bench.hpp"

namespace syncmem::bench {
void register_synced_memory_suite(const options&) {}
}  // namespace syncmem::bench
