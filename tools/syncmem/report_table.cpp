#include "report_table.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "case_table.hpp"
#include "report_format.hpp"

namespace syncmem::tool {
namespace {

constexpr std::size_t line_width = 100;     // prose
constexpr std::size_t table_columns = 118;  // tables: two spaces of indent short of 120

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

void render_table_body(std::string& out, const case_table& t) {
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
}

// Returns whether a figure was marked rough.
bool render_case(std::string& out, const bench_case& c) {
  const case_table t = tabulate(c, table_columns);
  out += wrap(fmt::format("{}: {}", c.title(), t.title), table_columns, "  ") + "\n";
  render_table_body(out, t);
  bool rough = has_rough(t);
  for (const auto& modes : tabulate_modes(c, table_columns)) {
    // fmt, not "\n" + string: GCC 12 at -O3 warns falsely (-Wrestrict) of the latter.
    out += fmt::format("\n{}\n", wrap(fmt::format("{}, {}", c.title(), modes.title), table_columns, "  "));
    render_table_body(out, modes);
    rough = rough || has_rough(modes);
  }
  if (const case_table counters = tabulate_counters(c); !counters.rows.empty()) {
    out += fmt::format("\n{}, counters:\n", c.title());
    render_table_body(out, counters);
  }
  out += "\n";
  return rough;
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
  bool rough = false;
  for (const auto& c : cases) rough = render_case(out, c) || rough;
  if (rough) {
    out += wrap(fmt::format("{0} marks a rough figure: measured over fewer than {1} iterations, or a ratio within the "
                            "spread of its rounds. Measure longer (without --quick, or with --rounds 5) before "
                            "reading much into it.",
                            rough_mark, rough_below_iterations),
                line_width, "") +
           "\n\n";
  }
  std::vector<const bench_run*> failed;
  for (const auto& r : results.runs) {
    if (!r.error.empty()) failed.push_back(&r);
  }
  if (!failed.empty()) {
    out += fmt::format("{} run{} failed:\n", failed.size(), failed.size() == 1 ? "" : "s");
    for (const auto* r : failed) out += fmt::format("  {}: {}\n", r->name, r->error);
    out += "\n";
  }
  if (!results.gpu) out += figures_reminder(results) + "\n";
  return out;
}

}  // namespace syncmem::tool
