#include "report_table.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "case_table.hpp"
#include "report_format.hpp"

namespace syncmem::tool {
namespace {

constexpr std::size_t line_width = 100;

std::string wrap(const std::string& text, std::size_t width, const std::string& indent) {
  std::istringstream words{text};
  std::string word;
  std::string out;
  std::size_t column = 0;
  while (words >> word) {
    const std::size_t w = display_width(word);
    if (column > 0 && column + 1 + w > width) {
      out += "\n" + indent;
      column = indent.size();
    } else if (column > 0) {
      out += ' ';
      ++column;
    }
    out += word;
    column += w;
  }
  return out;
}

void render_case(std::string& out, const bench_case& c) {
  const auto ours = c.our_methods();
  const auto others = c.alternatives();
  std::string heading = fmt::format(
      "{}: {}", c.title(), c.bandwidth ? "bandwidth, higher is better" : "time per operation, lower is better");
  if (!ours.empty()) heading += fmt::format("; ours: {}", fmt::join(ours, ", "));
  out += heading + "\n";

  const case_table t = tabulate(c);
  std::vector<std::size_t> widths(t.header.size(), 0);
  for (std::size_t i = 0; i < t.header.size(); ++i) widths[i] = display_width(t.header[i]);
  for (const auto& row : t.rows) {
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], display_width(row[i].text));
  }
  auto line = [&](auto text_of) {
    std::string text;
    for (std::size_t i = 0; i < widths.size(); ++i) {
      text += "  ";
      text += i < t.name_columns ? pad_right(text_of(i), widths[i]) : pad_left(text_of(i), widths[i]);
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  };
  line([&](std::size_t i) { return t.header[i]; });
  for (const auto& row : t.rows) line([&](std::size_t i) { return row[i].text; });
  for (const auto& counter : c.counters) {
    for (const auto& p : c.parameters) {
      std::vector<std::string> values;
      for (const auto& m : c.methods) {
        const bench_run* r = c.find(m, p);
        if (r == nullptr || !r->error.empty()) continue;
        const auto it = r->counters.find(counter);
        if (it != r->counters.end()) values.push_back(fmt::format("{} {}", m, three_digits(it->second)));
      }
      if (!values.empty()) out += fmt::format("  {} at {}: {}\n", counter, p, fmt::join(values, ", "));
    }
  }
  out += "\n";
}

}  // namespace

std::string render_table(const bench_results& results) {
  std::string out;
  std::string title = "syncmem bench";
  if (!results.date.empty()) title += ", " + results.date;
  if (results.machine.is_object() && results.machine.contains("version") && results.machine["version"].is_string()) {
    title += fmt::format(", syncmem {}", results.machine["version"].get<std::string>());
    if (results.machine.contains("build_type") && results.machine["build_type"].is_string()) {
      title += fmt::format(" ({})", results.machine["build_type"].get<std::string>());
    }
  }
  if (results.quick) title += ", quick run";
  if (results.rounds > 1) title += fmt::format(", median of {} rounds", results.rounds);
  out += title + "\n";
  out += wrap(figures_source(results), line_width, "") + "\n";
  if (const auto warning = build_warning(results); !warning.empty()) out += wrap(warning, line_width, "") + "\n";
  const auto cases = group_cases(results);
  if (cases.empty()) {
    out += "No benchmark ran.\n";
    return out;
  }
  out += "Ratios say how many times faster ours is than the alternative (above 1: ours is faster).\n\n";
  for (const auto& c : cases) render_case(out, c);
  std::vector<const bench_run*> failed;
  for (const auto& r : results.runs) {
    if (!r.error.empty()) failed.push_back(&r);
  }
  if (!failed.empty()) {
    out += fmt::format("{} run{} failed:\n", failed.size(), failed.size() == 1 ? "" : "s");
    for (const auto* r : failed) out += fmt::format("  {}: {}\n", r->name, r->error);
    out += "\n";
  }
  if (!results.gpu) out += wrap(figures_source(results), line_width, "") + "\n";
  return out;
}

}  // namespace syncmem::tool
