#include "case_table.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "report_format.hpp"

namespace syncmem::tool {
namespace {

table_cell figure_cell(const bench_case& c, const bench_run* r, bool ours) {
  if (r == nullptr) return {"-", table_cell::kind::none, {}, false};
  if (!r->error.empty()) return {"failed", table_cell::kind::failed, r->error, false};
  const auto f = c.figure(*r);
  if (!f) return {"-", table_cell::kind::none, {}, false};
  const bool rough = c.rough(*r);
  std::string text = c.bandwidth ? format_bandwidth(*f) : format_time(*f);
  if (rough) text = std::string{rough_mark} + text;
  return {std::move(text), ours ? table_cell::kind::ours : table_cell::kind::figure, {}, rough};
}

table_cell ratio_cell(const bench_case& c, const std::string& ours, const std::string& other, const std::string& p) {
  const auto s = c.speedup(ours, other, p);
  if (!s) return {"-", table_cell::kind::none, {}, false};
  const bench_run* a = c.find(ours, p);
  const bench_run* b = c.baseline(other, p);
  const bool rough = c.within_spread(ours, other, p) || (a != nullptr && c.rough(*a)) || (b != nullptr && c.rough(*b));
  std::string text = format_ratio(*s);
  if (rough) text = std::string{rough_mark} + text;
  return {std::move(text), *s >= 1 ? table_cell::kind::better : table_cell::kind::worse, {}, rough};
}

table_cell name_cell(std::string text) { return {std::move(text), table_cell::kind::name, {}, false}; }
table_cell empty_cell() { return {"", table_cell::kind::name, {}, false}; }

std::string method_label(const std::string& m, bool ours) { return ours ? m + " (ours)" : m; }

// Leaves out ratio columns (from `first` on) that hold no ratio at all.
void drop_empty_columns(case_table& t, std::size_t first) {
  for (std::size_t col = t.header.size(); col-- > first;) {
    const bool empty = std::all_of(t.rows.begin(), t.rows.end(), [col](const auto& row) {
      return row[col].what == table_cell::kind::none || row[col].text.empty();
    });
    if (!empty) continue;
    t.header.erase(t.header.begin() + static_cast<std::ptrdiff_t>(col));
    t.header_ours.erase(t.header_ours.begin() + static_cast<std::ptrdiff_t>(col));
    for (auto& row : t.rows) row.erase(row.begin() + static_cast<std::ptrdiff_t>(col));
  }
}

std::string parameter_header(const bench_case& c) { return c.sizes ? "size" : "parameter"; }

// A row per parameter, a column per method, then the ratios.
case_table grid(const bench_case& c, const std::vector<std::string>& ours, const std::vector<std::string>& others) {
  case_table t;
  t.header.push_back(parameter_header(c));
  t.header_ours.push_back(false);
  for (const auto* group : {&ours, &others}) {
    for (const auto& m : *group) {
      t.header.push_back(method_label(m, group == &ours));
      t.header_ours.push_back(group == &ours);
    }
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
    std::vector<table_cell> row{name_cell(p)};
    for (const auto* group : {&ours, &others}) {
      for (const auto& m : *group) row.push_back(figure_cell(c, c.find(m, p), group == &ours));
    }
    for (const auto& [o, a] : pairs) row.push_back(ratio_cell(c, o, a, p));
    t.rows.push_back(std::move(row));
  }
  drop_empty_columns(t, first_ratio);
  return t;
}

// A row per parameter and method, a ratio column per method of ours.
case_table long_form(const bench_case& c, const std::vector<std::string>& ours,
                     const std::vector<std::string>& others) {
  case_table t;
  t.name_columns = 2;
  t.header = {parameter_header(c), "method", c.bandwidth ? "bandwidth" : "time"};
  t.header_ours = {false, false, false};
  for (const auto& o : ours) {
    t.header.push_back(o);  // the title says what these columns hold
    t.header_ours.push_back(false);
  }
  for (const auto& p : c.parameters) {
    bool first = true;
    for (const auto* group : {&ours, &others}) {
      for (const auto& m : *group) {
        const bench_run* r = c.find(m, p);
        if (r == nullptr) continue;
        std::vector<table_cell> row{first ? name_cell(p) : empty_cell(), name_cell(method_label(m, group == &ours)),
                                    figure_cell(c, r, group == &ours)};
        for (const auto& o : ours) row.push_back(group == &others ? ratio_cell(c, o, m, p) : empty_cell());
        t.rows.push_back(std::move(row));
        first = false;
      }
    }
  }
  drop_empty_columns(t, 3);
  return t;
}

case_table by_run(const bench_case& c, const std::vector<std::string>& ours, const std::vector<std::string>& others) {
  case_table t;
  t.name_columns = 2;
  t.header = {"method", parameter_header(c), c.bandwidth ? "bandwidth" : "time"};
  t.header_ours = {false, false, false};
  for (const auto& a : others) {
    t.header.push_back(fmt::format("vs {}", a));
    t.header_ours.push_back(false);
  }
  for (const auto* group : {&ours, &others}) {
    for (const auto& m : *group) {
      const bool mine = group == &ours;
      for (const auto& p : c.parameters_of(m)) {
        std::vector<table_cell> row{name_cell(method_label(m, mine)), name_cell(p), figure_cell(c, c.find(m, p), mine)};
        for (const auto& a : others) {
          row.push_back(mine ? ratio_cell(c, m, a, p) : table_cell{"-", table_cell::kind::none, {}, false});
        }
        t.rows.push_back(std::move(row));
      }
    }
  }
  drop_empty_columns(t, 3);
  return t;
}

case_table lay_out(const bench_case& c, const std::vector<std::string>& ours, const std::vector<std::string>& others,
                   std::size_t max_width) {
  if (c.sparse()) return by_run(c, ours, others);
  case_table t = grid(c, ours, others);
  if (table_width(t) <= max_width) return t;
  t = long_form(c, ours, others);
  t.long_form = true;
  return t;
}

std::string long_form_note(const case_table& t) {
  return t.long_form && t.header.size() > 3 ? "; after the figure, how many times faster each of ours is than the row"
                                            : "";
}

}  // namespace

std::size_t table_width(const case_table& t) {
  std::vector<std::size_t> widths(t.header.size(), 0);
  for (std::size_t i = 0; i < t.header.size(); ++i) widths[i] = display_width(t.header[i]);
  for (const auto& row : t.rows) {
    for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], display_width(row[i].text));
    }
  }
  std::size_t total = 0;
  for (const auto w : widths) total += 2 + w;
  return total;
}

bool has_rough(const case_table& t) {
  return std::any_of(t.rows.begin(), t.rows.end(), [](const auto& row) {
    return std::any_of(row.begin(), row.end(), [](const auto& cell) { return cell.rough; });
  });
}

case_table tabulate(const bench_case& c, std::size_t max_width) {
  case_table t = lay_out(c, c.our_methods(), c.alternatives(), max_width);
  const auto ours = c.our_methods();
  t.title = c.bandwidth ? "bandwidth, higher is better" : "time per operation, lower is better";
  if (!ours.empty()) t.title += fmt::format("; ours: {}", fmt::join(ours, ", "));
  t.title += long_form_note(t);
  return t;
}

case_table tabulate_counters(const bench_case& c) {
  case_table t;
  t.title = "counters";
  t.name_columns = 2;
  t.header = {parameter_header(c), "method"};
  t.header_ours = {false, false};
  std::vector<std::string> counters;
  for (const auto& counter : c.counters) {
    if (counter == "ns_per_op") continue;  // the figure itself
    counters.push_back(counter);
    t.header.push_back(counter);
    t.header_ours.push_back(false);
  }
  if (counters.empty()) return t;
  std::vector<std::string> methods = c.our_methods();
  for (const auto& group : {c.modes(), c.alternatives()}) methods.insert(methods.end(), group.begin(), group.end());
  for (const auto& p : c.parameters) {
    bool first = true;
    for (const auto& m : methods) {
      const bench_run* r = c.find(m, p);
      if (r == nullptr || !r->error.empty()) continue;
      std::vector<table_cell> row{first ? name_cell(p) : empty_cell(), name_cell(m)};
      bool any = false;
      for (const auto& counter : counters) {
        const auto it = r->counters.find(counter);
        if (it == r->counters.end()) {
          row.push_back({"-", table_cell::kind::none, {}, false});
          continue;
        }
        any = true;
        // peak_reserved, peak_allocated, peak_requested: bytes.
        const bool bytes = counter.starts_with("peak_") && counter != "peak_ratio";
        row.push_back({bytes ? format_bytes(static_cast<std::uint64_t>(it->second)) : three_digits(it->second),
                       table_cell::kind::figure,
                       {},
                       false});
      }
      if (!any) continue;
      t.rows.push_back(std::move(row));
      first = false;
    }
  }
  return t;
}

std::vector<case_table> tabulate_modes(const bench_case& c, std::size_t max_width) {
  std::vector<std::string> bases;
  for (const auto& m : c.modes()) {
    const auto base = mode_of(m);
    if (std::find(bases.begin(), bases.end(), base) == bases.end()) bases.push_back(base);
  }
  std::vector<case_table> tables;
  for (const auto& base : bases) {
    std::vector<std::string> modes;
    for (const auto& m : c.modes()) {
      if (mode_of(m) == base) modes.push_back(m);
    }
    const std::vector<std::string> ours{base};
    case_table t = lay_out(c, ours, modes, max_width);
    t.title =
        fmt::format("syncmem's modes: {} (the default) beside {} with other options{}", base, base, long_form_note(t));
    tables.push_back(std::move(t));
  }
  return tables;
}

}  // namespace syncmem::tool
