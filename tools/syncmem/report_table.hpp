#pragma once

// The summary table `syncmem bench` prints: one block per case, our figure
// beside each alternative with the ratio, and where the figures come from.

#include <string>

#include "bench_results.hpp"

namespace syncmem::tool {

[[nodiscard]] std::string render_table(const bench_results& results);

}  // namespace syncmem::tool
