#include "case_table.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "report_format.hpp"

namespace syncmem::tool {
namespace {

table_cell figure_cell(const bench_case& c, const bench_run* r, bool ours) {
  if (r == nullptr) return {"-", table_cell::kind::none, {}};
  if (!r->error.empty()) return {"failed", table_cell::kind::failed, r->error};
  const auto f = c.figure(*r);
  if (!f) return {"-", table_cell::kind::none, {}};
  return {c.bandwidth ? format_bandwidth(*f) : format_time(*f),
          ours ? table_cell::kind::ours : table_cell::kind::figure,
          {}};
}

table_cell ratio_cell(const std::optional<double>& s) {
  if (!s) return {"-", table_cell::kind::none, {}};
  return {format_ratio(*s), *s >= 1 ? table_cell::kind::better : table_cell::kind::worse, {}};
}

// Leaves out ratio columns (from `first` on) that hold no ratio at all.
void drop_empty_columns(case_table& t, std::size_t first) {
  for (std::size_t col = t.header.size(); col-- > first;) {
    const bool empty = std::all_of(t.rows.begin(), t.rows.end(),
                                   [col](const auto& row) { return row[col].what == table_cell::kind::none; });
    if (!empty) continue;
    t.header.erase(t.header.begin() + static_cast<std::ptrdiff_t>(col));
    t.header_ours.erase(t.header_ours.begin() + static_cast<std::ptrdiff_t>(col));
    for (auto& row : t.rows) row.erase(row.begin() + static_cast<std::ptrdiff_t>(col));
  }
}

case_table grid(const bench_case& c) {
  const auto ours = c.our_methods();
  const auto others = c.alternatives();
  case_table t;
  t.header.push_back(c.sizes ? "size" : "parameter");
  t.header_ours.push_back(false);
  for (const auto& m : c.methods) {
    t.header.push_back(c.is_ours(m) ? m + " (ours)" : m);
    t.header_ours.push_back(c.is_ours(m));
  }
  const std::size_t first_ratio = t.header.size();
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& o : ours) {
    for (const auto& a : others) {
      pairs.emplace_back(o, a);
      t.header.push_back(ours.size() == 1 ? fmt::format("vs {}", a) : fmt::format("{} vs {}", o, a));
      t.header_ours.push_back(false);
    }
  }
  for (const auto& p : c.parameters) {
    std::vector<table_cell> row{{p, table_cell::kind::name, {}}};
    for (const auto& m : c.methods) row.push_back(figure_cell(c, c.find(m, p), c.is_ours(m)));
    for (const auto& [o, a] : pairs) row.push_back(ratio_cell(c.speedup(o, a, p)));
    t.rows.push_back(std::move(row));
  }
  drop_empty_columns(t, first_ratio);
  return t;
}

case_table by_run(const bench_case& c) {
  const auto others = c.alternatives();
  case_table t;
  t.name_columns = 2;
  t.header = {"method", c.sizes ? "size" : "parameter", c.bandwidth ? "bandwidth" : "time"};
  t.header_ours = {false, false, false};
  for (const auto& a : others) {
    t.header.push_back(fmt::format("vs {}", a));
    t.header_ours.push_back(false);
  }
  for (const auto& m : c.methods) {
    const bool ours = c.is_ours(m);
    for (const auto& p : c.parameters_of(m)) {
      std::vector<table_cell> row{{ours ? m + " (ours)" : m, table_cell::kind::name, {}},
                                  {p, table_cell::kind::name, {}},
                                  figure_cell(c, c.find(m, p), ours)};
      for (const auto& a : others) {
        row.push_back(ours ? ratio_cell(c.speedup(m, a, p)) : table_cell{"-", table_cell::kind::none, {}});
      }
      t.rows.push_back(std::move(row));
    }
  }
  drop_empty_columns(t, 3);
  return t;
}

}  // namespace

case_table tabulate(const bench_case& c) { return c.sparse() ? by_run(c) : grid(c); }

}  // namespace syncmem::tool
