#include "fit_search.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "syncmem/error.hpp"

namespace syncmem::bench {

namespace {
std::size_t round_up(std::size_t bytes, std::size_t step) { return (bytes + step - 1) / step * step; }
}  // namespace

fit_search_result find_smallest_fit(std::size_t low, std::size_t cap, std::size_t tolerance, std::size_t step,
                                    const std::function<bool(std::size_t)>& fits) {
  SYNCMEM_EXPECTS(low > 0 && low <= cap, fmt::format("find_smallest_fit: low {} must lie in 1..cap {}", low, cap));
  SYNCMEM_EXPECTS(step > 0 && tolerance >= step,
                  fmt::format("find_smallest_fit: step {} must lie in 1..tolerance {}", step, tolerance));
  fit_search_result result;
  const auto attempt = [&](std::size_t limit) {
    ++result.tries;
    return fits(limit);
  };
  std::size_t failed = low - 1;  // the largest limit known not to fit (below low nothing can)
  std::size_t fit = 0;           // the smallest limit known to fit; 0: none yet
  for (std::size_t candidate = std::min(round_up(2 * low, step), cap);; candidate = std::min(2 * candidate, cap)) {
    if (attempt(candidate)) {
      fit = candidate;
      break;
    }
    failed = candidate;
    if (candidate == cap) return result;
  }
  while (fit - failed > tolerance) {
    const std::size_t middle = std::max(round_up(failed + (fit - failed) / 2, step), failed + 1);
    if (middle >= fit) break;
    if (attempt(middle)) {
      fit = middle;
    } else {
      failed = middle;
    }
  }
  result.limit = fit;
  return result;
}

}  // namespace syncmem::bench
