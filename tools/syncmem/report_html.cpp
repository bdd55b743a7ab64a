#include "report_html.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "case_table.hpp"
#include "html_page.hpp"
#include "report_format.hpp"
#include "svg_plot.hpp"

namespace syncmem::tool {
namespace {

using svg::escape;

std::string str(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return {};
  const auto& v = j[key];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// One colour per method, the same in every plot of the page.
class method_colors {
 public:
  explicit method_colors(const bench_results& results) {
    for (const auto& r : results.runs) {
      if (!colors_.contains(r.method)) colors_.emplace(r.method, svg::palette(colors_.size()));
    }
  }
  [[nodiscard]] std::string operator()(const std::string& method) const {
    const auto it = colors_.find(method);
    return it == colors_.end() ? svg::palette(0) : it->second;
  }

 private:
  std::map<std::string, std::string> colors_;
};

std::string anchor(const bench_case& c) {
  std::string id = "case-" + c.title();
  for (char& ch : id) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') ch = '-';
  }
  return id;
}

std::string machine_section(const bench_results& results) {
  const nlohmann::json& m = results.machine;
  std::string rows;
  auto row = [&rows](const std::string& key, const std::string& value) {
    if (!value.empty()) rows += fmt::format("<tr><th>{}</th><td>{}</td></tr>", escape(key), escape(value));
  };
  row("syncmem", fmt::format("{} ({}), {}", str(m, "version"), str(m, "build_type"), str(m, "compiler")));
  if (m.is_object() && m.contains("cuda_enabled")) {
    row("CUDA", m["cuda_enabled"] == true
                    ? fmt::format("built; runtime {}, driver {}", str(m, "cuda_runtime"), str(m, "cuda_driver"))
                    : std::string{"not built"});
  }
  if (m.is_object() && m.contains("host")) {
    row("Host", fmt::format("{}, {} hardware threads", str(m["host"], "cpu"), str(m["host"], "threads")));
  }
  if (m.is_object() && m.contains("devices") && m["devices"].is_array()) {
    for (const auto& d : m["devices"]) {
      if (d.contains("error")) {
        row(str(d, "id"), "error: " + str(d, "error"));
        continue;
      }
      std::string text = str(d, "name");
      if (d.contains("memory_bytes") && d["memory_bytes"].is_number_unsigned()) {
        text += ", " + format_bytes(d["memory_bytes"].get<std::uint64_t>());
      }
      if (str(d, "kind") == "cuda") text += ", sm_" + str(d, "compute_capability");
      if (d.contains("multiprocessors")) text += ", " + str(d, "multiprocessors") + " SMs";
      if (d.contains("link")) text += ", " + str(d, "link");
      row(str(d, "id"), text);
    }
  }
  if (m.is_object() && m.contains("no_devices") && m["no_devices"].is_object()) {
    for (const auto& [kind, why] : m["no_devices"].items()) {
      row(fmt::format("no {} devices", kind), why.is_string() ? why.get<std::string>() : why.dump());
    }
  }
  const nlohmann::json& c = results.context;
  if (c.is_object() && !c.empty()) {
    std::string text = fmt::format("{} CPUs at {} MHz", str(c, "cpus"), str(c, "mhz_per_cpu"));
    if (c.contains("cpu_scaling_enabled") && c["cpu_scaling_enabled"] == true) {
      text += "; CPU frequency scaling was on (figures may vary)";
    }
    if (c.contains("load_avg") && c["load_avg"].is_array() && !c["load_avg"].empty()) {
      std::vector<std::string> loads;
      for (const auto& l : c["load_avg"])
        loads.push_back(l.is_number() ? fmt::format("{:.2f}", l.get<double>()) : l.dump());
      text += fmt::format("; load average {}", fmt::join(loads, ", "));
    }
    row("While measuring", text);
  }
  row("Benchmark devices", fmt::format("{}", fmt::join(results.devices, ", ")));
  std::string out = "<section class=\"machine\"><h2>Machine</h2><table class=\"kv\">" + rows + "</table>";
  out += "<details><summary>Machine description as JSON</summary><pre>" + escape(m.dump(2)) + "</pre></details>";
  out += "</section>\n";
  return out;
}

std::string case_table_html(const case_table& t) {
  std::string out = "<table class=\"case-table\"><tr>";
  for (std::size_t i = 0; i < t.header.size(); ++i) {
    const char* cls = i < t.name_columns ? " class=\"name\"" : t.header_ours[i] ? " class=\"ours\"" : "";
    out += fmt::format("<th{}>{}</th>", cls, escape(t.header[i]));
  }
  out += "</tr>";
  for (const auto& row : t.rows) {
    out += "<tr>";
    for (const auto& cell : row) {
      const char* cls = "";
      switch (cell.what) {
        case table_cell::kind::name:
          cls = "name";
          break;
        case table_cell::kind::ours:
          cls = "ours";
          break;
        case table_cell::kind::failed:
          cls = "failed";
          break;
        case table_cell::kind::better:
          cls = "better";
          break;
        case table_cell::kind::worse:
          cls = "worse";
          break;
        case table_cell::kind::figure:
        case table_cell::kind::none:
          break;
      }
      const std::string title = cell.note.empty() ? "" : fmt::format(" title=\"{}\"", escape(cell.note));
      out += fmt::format("<td class=\"{}\"{}>{}</td>", cls, title,
                         escape(cell.what == table_cell::kind::none ? std::string{"–"} : cell.text));
    }
    out += "</tr>";
  }
  return out + "</table>";
}

std::string case_plot(const bench_case& c, const method_colors& colors) {
  if (c.bandwidth && c.sizes && c.parameters.size() >= 2) {  // one size: bars read better than a lone point
    svg::line_chart chart;
    chart.title = c.title() + ": bandwidth by size";
    chart.kind = "bandwidth";
    chart.x = {"size (log scale)", svg::scale::log2, [](double v) { return size_label(v); }};
    chart.y = {"bandwidth", svg::scale::linear, [](double v) { return format_bandwidth(v); }};
    for (const auto& m : c.methods) {
      svg::line_series s{m, colors(m), c.is_ours(m), {}};
      for (const auto& p : c.parameters) {
        const bench_run* r = c.find(m, p);
        if (r == nullptr) continue;
        if (const auto f = c.figure(*r)) s.points.emplace_back(static_cast<double>(*parse_size(p)), *f);
      }
      chart.series.push_back(std::move(s));
    }
    return svg::render(chart);
  }
  svg::bar_chart chart;
  chart.kind = c.bandwidth ? "bandwidth" : "latency";
  chart.title = c.title() + (c.bandwidth ? ": bandwidth" : ": time per operation");
  chart.x_label = c.sizes ? "size" : "parameter";
  chart.groups = c.parameters;
  double lo = std::numeric_limits<double>::max();
  double hi = 0;
  for (const auto& m : c.methods) {
    svg::bar_series s{m, colors(m), c.is_ours(m), {}};
    for (const auto& p : c.parameters) {
      const bench_run* r = c.find(m, p);
      const auto f = r == nullptr ? std::nullopt : c.figure(*r);
      s.values.push_back(f);
      if (f && *f > 0) {
        lo = std::min(lo, *f);
        hi = std::max(hi, *f);
      }
    }
    chart.series.push_back(std::move(s));
  }
  // Allocator latencies span orders of magnitude (0.1 µs against 100 µs): a log axis keeps every bar visible.
  const bool log = hi > 0 && hi / lo > 30;
  if (c.bandwidth) {
    chart.y = {"bandwidth", log ? svg::scale::log10 : svg::scale::linear, [](double v) { return format_bandwidth(v); }};
  } else {
    chart.y = {log ? "time per operation (log scale)" : "time per operation",
               log ? svg::scale::log10 : svg::scale::linear, [](double v) { return format_time(v); }};
  }
  return svg::render(chart);
}

std::string counter_plots(const bench_case& c, const method_colors& colors) {
  std::string out;
  for (const auto& counter : c.counters) {
    svg::bar_chart chart;
    chart.kind = "counter";
    chart.title = fmt::format("{}: {}", c.title(), counter);
    chart.x_label = c.sizes ? "size" : "parameter";
    chart.y = {counter, svg::scale::linear, {}};
    chart.groups = c.parameters;
    for (const auto& m : c.methods) {
      svg::bar_series s{m, colors(m), c.is_ours(m), {}};
      for (const auto& p : c.parameters) {
        const bench_run* r = c.find(m, p);
        std::optional<double> v;
        if (r != nullptr && r->error.empty()) {
          if (const auto it = r->counters.find(counter); it != r->counters.end()) v = it->second;
        }
        s.values.push_back(v);
      }
      chart.series.push_back(std::move(s));
    }
    out += svg::render(chart);
  }
  return out;
}

std::string runs_section(const bench_results& results) {
  std::string out = fmt::format(
      "<section class=\"runs\"><h2>Every run</h2><details><summary>{}</summary><table><tr><th class=\"name\">"
      "name</th><th>iterations</th><th>time / iteration</th><th>CPU time / iteration</th><th>bandwidth</th>"
      "<th class=\"name\">counters</th><th class=\"name\">error</th></tr>",
      counted(results.runs.size(), "run"));
  for (const auto& r : results.runs) {
    std::vector<std::string> counters;
    for (const auto& [k, v] : r.counters) counters.push_back(fmt::format("{} = {}", k, three_digits(v)));
    out += fmt::format(
        "<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"name\">{}</td>"
        "<td class=\"name\">{}</td></tr>",
        escape(r.name), r.iterations, escape(format_time(r.real_time_ns)), escape(format_time(r.cpu_time_ns)),
        r.bytes_per_second ? escape(format_bandwidth(*r.bytes_per_second)) : std::string{"–"},
        escape(fmt::format("{}", fmt::join(counters, ", "))), escape(r.error));
  }
  out += "</table></details></section>\n";
  return out;
}

}  // namespace

std::string render_html(const bench_results& results) {
  const auto cases = group_cases(results);
  const method_colors colors{results};
  std::string body = "<h1>syncmem bench</h1>\n";
  std::vector<std::string> meta;
  if (!results.date.empty()) meta.push_back(results.date);
  if (!str(results.machine, "version").empty()) meta.push_back("syncmem " + str(results.machine, "version"));
  if (results.quick) meta.push_back("quick run (shorter measurements)");
  if (results.rounds > 1) meta.push_back(fmt::format("median of {} rounds", results.rounds));
  if (!results.filter.empty() && results.filter != ".") meta.push_back("filter " + results.filter);
  if (results.duration_s > 0) meta.push_back(fmt::format("{:.1f} s", results.duration_s));
  body += fmt::format("<p class=\"meta\">{}</p>\n", escape(fmt::format("{}", fmt::join(meta, " · "))));
  if (results.gpu) {
    body += fmt::format("<p class=\"source gpu\">{}</p>\n", escape(figures_source(results)));
  } else {
    body += fmt::format("<div class=\"notice not-gpu\">{}</div>\n", escape(figures_source(results)));
  }
  if (const auto warning = build_warning(results); !warning.empty()) {
    body += fmt::format("<div class=\"warning\">{}</div>\n", escape(warning));
  }
  body +=
      "<p>Each case compares syncmem's figure (ours, solid lines) with the alternatives measured in the same "
      "run (dashed). Ratios say how many times faster ours is: above 1, ours is faster.</p>\n";
  if (cases.empty()) body += "<p>No benchmark ran.</p>\n";
  if (!cases.empty()) {
    body += "<nav><h2>Cases</h2><ul>";
    for (const auto& c : cases) {
      body += fmt::format("<li><a href=\"#{}\">{}</a></li>", anchor(c), escape(c.title()));
    }
    body += "</ul></nav>\n";
  }
  for (const auto& c : cases) {
    body += fmt::format("<section class=\"case\" id=\"{}\"><h2>{}</h2>", anchor(c), escape(c.title()));
    std::string what = c.bandwidth ? "Bandwidth, higher is better." : "Time per operation, lower is better.";
    const auto ours = c.our_methods();
    if (!ours.empty()) what += fmt::format(" Ours: {}.", fmt::join(ours, ", "));
    body += "<p>" + escape(what) + "</p>";
    body += case_plot(c, colors);
    body += case_table_html(tabulate(c));
    for (const auto& modes : tabulate_modes(c)) {
      body += "<h3>" + escape(modes.title) + "</h3>" + case_table_html(modes);
    }
    body += counter_plots(c, colors);
    body += "</section>\n";
  }
  std::vector<const bench_run*> failed;
  for (const auto& r : results.runs) {
    if (!r.error.empty()) failed.push_back(&r);
  }
  if (!failed.empty()) {
    body += "<section class=\"failed\"><h2>Failed runs</h2><ul>";
    for (const auto* r : failed) body += fmt::format("<li>{}: {}</li>", escape(r->name), escape(r->error));
    body += "</ul></section>\n";
  }
  body += machine_section(results);
  body += runs_section(results);
  if (!results.gpu) body += fmt::format("<div class=\"notice not-gpu\">{}</div>\n", escape(figures_source(results)));
  body +=
      "<footer>Written by <code>syncmem bench</code>. <code>syncmem bench --from results.json --html "
      "page.html</code> draws this page again from saved results.</footer>";
  return html_page("syncmem bench" + (results.date.empty() ? std::string{} : ", " + results.date), body);
}

}  // namespace syncmem::tool
