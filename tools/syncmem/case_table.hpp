#pragma once

// One case laid out as tables, for the terminal and the page alike. The main
// table holds our methods and the alternatives. Most cases are a grid: a row
// per parameter (sizes in order), a column per method (ours first), then a
// column per pair of ours and an alternative with the ratio. Where that grid
// would be wider than the terminal allows, the case is a long table instead:
// a row per parameter and method, a ratio column per method of ours. A
// sparse case, where each method measured its own situation
// ("synced/accessor/syncmem-host_data/synced" beside "raw-pointer/any"), is a
// row per run, with the ratio against each alternative's baseline.
//
// The modes of one of our methods (caching_expandable, ... of caching) are
// not alternatives: they get a table of their own, beside that method.
//
// A figure resting on fewer than rough_below_iterations iterations, and a
// ratio whose two figures' rounds overlap, are marked with rough_mark.

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "bench_results.hpp"

namespace syncmem::tool {

inline constexpr std::string_view rough_mark = "≈";

struct table_cell {
  enum class kind { name, figure, ours, failed, better, worse, none };
  std::string text;
  kind what = kind::none;
  std::string note;    // a failed run's error
  bool rough = false;  // marked: too few iterations, or within the spread
};

struct case_table {
  std::string title;  // what the table shows, after the case's name
  std::vector<std::string> header;
  std::vector<bool> header_ours;  // columns holding our figures
  std::size_t name_columns = 1;   // leading columns of names (left-aligned)
  bool long_form = false;         // a row per parameter and method (the grid was too wide)
  std::vector<std::vector<table_cell>> rows;
};

inline constexpr std::size_t unlimited_width = std::numeric_limits<std::size_t>::max();

// The main table, no wider than `max_width` columns where a layout allows.
[[nodiscard]] case_table tabulate(const bench_case& c, std::size_t max_width = unlimited_width);

// A table for each of our methods that has modes in this case: the method
// beside its modes, ratios of the method against each mode.
[[nodiscard]] std::vector<case_table> tabulate_modes(const bench_case& c, std::size_t max_width = unlimited_width);

// The case's counters (peak_ratio, ...; not ns_per_op, which is the figure):
// a row per parameter and method, a column per counter. No rows when the case
// has no counters.
[[nodiscard]] case_table tabulate_counters(const bench_case& c);

// The columns a table takes on a terminal: two spaces before each column.
[[nodiscard]] std::size_t table_width(const case_table& t);

// Whether any cell of the table is marked rough.
[[nodiscard]] bool has_rough(const case_table& t);

}  // namespace syncmem::tool
