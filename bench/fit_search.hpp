#pragma once

// The search of the fit suite (allocator_fit.cpp), apart from any allocator
// so that a test can drive it with a made-up predicate.

#include <cstddef>
#include <functional>
#include <optional>

namespace syncmem::bench {

// The smallest limit found at which a workload fits, and what finding it took.
struct fit_search_result {
  std::optional<std::size_t> limit;  // nullopt: it does not fit even at the cap
  int tries = 0;                     // calls of the predicate
};

// Finds about the smallest limit in [low, cap] at which `fits(limit)` is
// true, for a predicate that is monotone (once it fits, it fits with more).
// `low` is a limit below which nothing can fit (the workload's peak of live
// bytes). The upper bound starts at twice `low` and doubles until a try fits
// (the last try is `cap`); then the interval between the largest limit that
// failed (or low - 1) and the smallest that fit is halved until it is at most
// `tolerance` wide. The limits tried are multiples of `step` (or the cap), so
// the answer is less than tolerance + step above the smallest that fits.
// @throws syncmem::logic_error unless 0 < low <= cap, step > 0 and tolerance >= step
[[nodiscard]] fit_search_result find_smallest_fit(std::size_t low, std::size_t cap, std::size_t tolerance,
                                                  std::size_t step, const std::function<bool(std::size_t)>& fits);

}  // namespace syncmem::bench
