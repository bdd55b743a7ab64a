#pragma once

// The page `syncmem bench --html` writes: where the figures come from, the
// machine, and for each case a plot (bandwidth against size, or time per
// operation as bars), its table with the ratios, and its counters as bars.

#include <string>

#include "bench_results.hpp"

namespace syncmem::tool {

[[nodiscard]] std::string render_html(const bench_results& results);

}  // namespace syncmem::tool
