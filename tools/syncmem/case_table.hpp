#pragma once

// One case laid out as a table, for the terminal and the page alike. Most
// cases are a grid: a row per parameter (sizes in order), a column per method
// (ours first), then a column per pair of ours and an alternative with the
// ratio. A sparse case, where each method measured its own situation
// ("synced/accessor/syncmem-host_data/synced" beside "raw-pointer/any"), is a
// row per run instead, with the ratio against each alternative's baseline.

#include <string>
#include <vector>

#include "bench_results.hpp"

namespace syncmem::tool {

struct table_cell {
  enum class kind { name, figure, ours, failed, better, worse, none };
  std::string text;
  kind what = kind::none;
  std::string note;  // a failed run's error
};

struct case_table {
  std::vector<std::string> header;
  std::vector<bool> header_ours;  // columns holding our figures
  std::size_t name_columns = 1;   // leading columns of names (left-aligned)
  std::vector<std::vector<table_cell>> rows;
};

[[nodiscard]] case_table tabulate(const bench_case& c);

}  // namespace syncmem::tool
