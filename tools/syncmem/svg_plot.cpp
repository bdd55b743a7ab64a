#include "svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "report_format.hpp"

namespace syncmem::tool::svg {
namespace {

constexpr double width = 960;
constexpr double height = 400;
constexpr double legend_width = 270;
constexpr double left = 84;
constexpr double top = 48;
constexpr double right = width - legend_width - 16;
constexpr double bottom = height - 64;
constexpr double char_width = 6.6;  // of 11px sans-serif, roughly

// A mapping from values to pixels along one axis, with its ticks.
struct range {
  scale kind = scale::linear;
  double lo = 0;
  double hi = 1;
  std::vector<double> ticks;

  [[nodiscard]] double f(double v) const {
    switch (kind) {
      case scale::log10:
        return std::log10(v);
      case scale::log2:
        return std::log2(v);
      case scale::linear:
        break;
    }
    return v;
  }
  // 0 at lo, 1 at hi.
  [[nodiscard]] double at(double v) const { return (f(v) - f(lo)) / (f(hi) - f(lo)); }
};

range make_range(scale kind, double min, double max) {
  range r;
  r.kind = kind;
  if (kind == scale::linear) {
    const double top_value = max > 0 ? max * 1.05 : 1.0;
    const double raw = top_value / 5;
    const double magnitude = std::pow(10, std::floor(std::log10(raw)));
    const double n = raw / magnitude;
    const double step = (n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10) * magnitude;
    r.lo = 0;
    r.hi = std::ceil(top_value / step) * step;
    for (double t = 0; t <= r.hi + step / 2; t += step) r.ticks.push_back(t);
    return r;
  }
  const double base = kind == scale::log2 ? 2.0 : 10.0;
  auto lg = [base](double v) { return std::log(v) / std::log(base); };
  double a = std::floor(lg(min) + 1e-9);
  double b = std::ceil(lg(max) - 1e-9);
  if (b <= a) {
    a -= 1;
    b += 1;
  }
  r.lo = std::pow(base, a);
  r.hi = std::pow(base, b);
  const double count = b - a;
  const double max_ticks = kind == scale::log2 ? 10 : 8;
  const double step = std::ceil(count / max_ticks);
  for (double e = a; e <= b + 1e-9; e += step) r.ticks.push_back(std::pow(base, e));
  return r;
}

std::string fmt_px(double v) { return fmt::format("{:.1f}", v); }

std::string label_text(const axis& a, double v) { return a.format ? a.format(v) : three_digits(v); }

std::string open_svg(const std::string& kind, const std::string& title) {
  std::string out =
      fmt::format(R"(<svg class="plot" data-plot="{}" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" )"
                  R"(viewBox="0 0 {} {}" role="img" aria-label="{}">)",
                  escape(kind), width, height, width, height, escape(title));
  out += fmt::format(R"(<rect x="0" y="0" width="{}" height="{}" fill="#ffffff"/>)", width, height);
  out +=
      fmt::format(R"(<text x="{}" y="24" font-size="15" font-weight="600" fill="#222">{}</text>)", left, escape(title));
  return out;
}

// Horizontal grid lines and tick labels of the y axis, and its title.
std::string y_axis(const range& r, const axis& a) {
  std::string out;
  for (const double t : r.ticks) {
    const double y = bottom - r.at(t) * (bottom - top);
    out +=
        fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#e4e4e4"/>)", left, fmt_px(y), right, fmt_px(y));
    out += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="end" fill="#444">{}</text>)", left - 6,
                       fmt_px(y + 4), escape(label_text(a, t)));
  }
  out += fmt::format(R"svg(<text transform="translate(18 {}) rotate(-90)" font-size="12" text-anchor="middle" )svg"
                     R"(fill="#222">{}</text>)",
                     fmt_px((top + bottom) / 2), escape(a.label));
  out += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#888"/>)", left, top, left, bottom);
  out += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#888"/>)", left, bottom, right, bottom);
  return out;
}

struct legend_entry {
  std::string name;
  std::string color;
  bool emphasized;
};

std::string legend(const std::vector<legend_entry>& entries) {
  std::string out;
  double y = top;
  for (const auto& e : entries) {
    out += fmt::format(R"(<rect x="{}" y="{}" width="16" height="16" fill="{}"/>)", right + 20, fmt_px(y), e.color);
    const std::string full = e.emphasized ? e.name + " (ours)" : e.name;
    std::string name = full;
    const std::size_t fits = static_cast<std::size_t>((legend_width - 48) / 7.4);  // bold 12px glyphs
    if (display_width(name) > fits) name = name.substr(0, fits - 1) + "…";
    out += fmt::format(R"(<text x="{}" y="{}" font-size="12" fill="#222"{}><title>{}</title>{}</text>)", right + 42,
                       fmt_px(y + 12.5), e.emphasized ? R"( font-weight="600")" : "", escape(full), escape(name));
    y += 24;
  }
  return out;
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string palette(std::size_t index) {
  static constexpr const char* colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1",
                                           "#9c755f", "#76b7b2", "#edc948", "#ff9da7", "#bab0ac"};
  return colors[index % 10];
}

std::string render(const line_chart& chart) {
  double xmin = std::numeric_limits<double>::max();
  double xmax = std::numeric_limits<double>::lowest();
  double ymin = std::numeric_limits<double>::max();
  double ymax = std::numeric_limits<double>::lowest();
  std::vector<legend_entry> entries;
  for (const auto& s : chart.series) {
    bool any = false;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      if (chart.x.kind != scale::linear && x <= 0) continue;
      if (chart.y.kind != scale::linear && y <= 0) continue;
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
      any = true;
    }
    if (any) entries.push_back({s.name, s.color, s.emphasized});
  }
  if (entries.empty()) return {};
  const range rx = make_range(chart.x.kind, xmin, xmax);
  const range ry = make_range(chart.y.kind, ymin, ymax);
  auto px = [&rx](double x) { return left + 12 + rx.at(x) * (right - left - 24); };
  auto py = [&ry](double y) { return bottom - ry.at(y) * (bottom - top); };

  std::string out = open_svg(chart.kind, chart.title);
  out += y_axis(ry, chart.y);
  for (const double t : rx.ticks) {
    out +=
        fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#888"/>)", fmt_px(px(t)), bottom, bottom + 5);
    out += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle" fill="#444">{}</text>)",
                       fmt_px(px(t)), bottom + 19, escape(label_text(chart.x, t)));
  }
  out += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle" fill="#222">{}</text>)",
                     fmt_px((left + right) / 2), bottom + 44, escape(chart.x.label));
  for (const auto& s : chart.series) {
    std::vector<std::pair<double, double>> points;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      if ((chart.x.kind != scale::linear && x <= 0) || (chart.y.kind != scale::linear && y <= 0)) continue;
      points.emplace_back(x, y);
    }
    if (points.empty()) continue;
    std::sort(points.begin(), points.end());
    std::string path;
    for (const auto& [x, y] : points) path += fmt::format("{},{} ", fmt_px(px(x)), fmt_px(py(y)));
    out += fmt::format(R"(<g class="series" data-name="{}">)", escape(s.name));
    out += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="{}"{} points="{}"/>)", s.color,
                       s.emphasized ? 3 : 2, s.emphasized ? "" : R"( stroke-dasharray="7 4")", path);
    for (const auto& [x, y] : points) {
      out += fmt::format(R"(<circle cx="{}" cy="{}" r="{}" fill="{}"><title>{}: {}, {}</title></circle>)",
                         fmt_px(px(x)), fmt_px(py(y)), s.emphasized ? 4 : 3.5, s.color, escape(s.name),
                         escape(label_text(chart.x, x)), escape(label_text(chart.y, y)));
    }
    out += "</g>";
  }
  out += legend(entries);
  out += "</svg>";
  return out;
}

std::string render(const bar_chart& chart) {
  double ymin = std::numeric_limits<double>::max();
  double ymax = std::numeric_limits<double>::lowest();
  std::vector<legend_entry> entries;
  std::vector<const bar_series*> shown;
  for (const auto& s : chart.series) {
    bool any = false;
    for (const auto& v : s.values) {
      if (!v || !std::isfinite(*v) || (chart.y.kind != scale::linear && *v <= 0)) continue;
      ymin = std::min(ymin, *v);
      ymax = std::max(ymax, *v);
      any = true;
    }
    if (any) {
      entries.push_back({s.name, s.color, s.emphasized});
      shown.push_back(&s);
    }
  }
  if (shown.empty() || chart.groups.empty()) return {};
  const range ry = make_range(chart.y.kind, std::min(ymin, ymax), ymax);
  auto py = [&ry](double y) { return bottom - ry.at(y) * (bottom - top); };
  // Each group draws only the bars it has, side by side and centred, so that
  // a group where one method ran is not a lone bar off to one side.
  auto drawable = [&chart](const bar_series& s, std::size_t g) {
    return g < s.values.size() && s.values[g] && std::isfinite(*s.values[g]) &&
           (chart.y.kind == scale::linear || *s.values[g] > 0);
  };
  std::size_t widest = 1;
  for (std::size_t g = 0; g < chart.groups.size(); ++g) {
    const auto n = static_cast<std::size_t>(
        std::count_if(shown.begin(), shown.end(), [&](const bar_series* s) { return drawable(*s, g); }));
    widest = std::max(widest, n);
  }
  const double band = (right - left) / static_cast<double>(chart.groups.size());
  const double bar = std::min(48.0, band * 0.8 / static_cast<double>(widest));
  std::size_t longest = 0;
  for (const auto& g : chart.groups) longest = std::max(longest, display_width(g));
  const bool rotate = static_cast<double>(longest) * char_width > band - 4;

  std::string out = open_svg(chart.kind, chart.title);
  out += y_axis(ry, chart.y);
  for (std::size_t g = 0; g < chart.groups.size(); ++g) {
    std::vector<const bar_series*> here;
    for (const auto* s : shown) {
      if (drawable(*s, g)) here.push_back(s);
    }
    const double center = left + band * (static_cast<double>(g) + 0.5);
    const double start = center - bar * static_cast<double>(here.size()) / 2;
    for (std::size_t i = 0; i < here.size(); ++i) {
      const bar_series& s = *here[i];
      const double v = *s.values[g];
      const double y = py(v);
      const double x = start + bar * static_cast<double>(i);
      out += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{} at {}: {}</title></rect>)",
                         fmt_px(x + 1), fmt_px(y), fmt_px(bar - 2), fmt_px(std::max(0.5, bottom - y)), s.color,
                         escape(s.name), escape(chart.groups[g]), escape(label_text(chart.y, v)));
      if (bar >= 30) {
        out += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="middle" fill="#333">{}</text>)",
                           fmt_px(x + bar / 2), fmt_px(y - 4), escape(label_text(chart.y, v)));
      }
    }
    if (rotate) {
      out += fmt::format(R"svg(<text transform="translate({} {}) rotate(-25)" font-size="11" text-anchor="end" )svg"
                         R"(fill="#444">{}</text>)",
                         fmt_px(center), bottom + 16, escape(chart.groups[g]));
    } else {
      out += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle" fill="#444">{}</text>)",
                         fmt_px(center), bottom + 19, escape(chart.groups[g]));
    }
  }
  if (!rotate) {
    out += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle" fill="#222">{}</text>)",
                       fmt_px((left + right) / 2), bottom + 44, escape(chart.x_label));
  }
  out += legend(entries);
  out += "</svg>";
  return out;
}

}  // namespace syncmem::tool::svg
