// Placeholder until the transfer suite lands (it registers nothing yet).
#include "bench.hpp"

namespace syncmem::bench {
void register_transfer_suite(const options&) {}
}  // namespace syncmem::bench
