// Placeholder until the allocator suite lands (it registers nothing yet).
#include "bench.hpp"

namespace syncmem::bench {
void register_allocator_suite(const options&) {}
}  // namespace syncmem::bench
