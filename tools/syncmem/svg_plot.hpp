#pragma once

// Small SVG charts for the pages the command writes: lines (bandwidth against
// size) and grouped bars (time per operation, counters). Plain SVG, no script:
// each point and bar carries a <title> that browsers show on hover.

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace syncmem::tool::svg {

enum class scale { linear, log10, log2 };

struct axis {
  std::string label;
  scale kind = scale::linear;
  std::function<std::string(double)> format;  // tick and tooltip text; three digits when empty
};

struct line_series {
  std::string name;
  std::string color;
  bool emphasized = false;  // drawn solid and thicker (ours); others dashed
  std::vector<std::pair<double, double>> points;
};

struct line_chart {
  std::string title;
  std::string kind;  // the svg's data-plot attribute, e.g. "bandwidth"
  axis x;
  axis y;
  std::vector<line_series> series;
};

struct bar_series {
  std::string name;
  std::string color;
  bool emphasized = false;
  std::vector<std::optional<double>> values;  // one per group; empty where it did not run
};

struct bar_chart {
  std::string title;
  std::string kind;
  std::string x_label;
  axis y;
  std::vector<std::string> groups;
  std::vector<bar_series> series;
};

// An <svg class="plot" data-plot="kind"> element; empty series are left out.
[[nodiscard]] std::string render(const line_chart& chart);
[[nodiscard]] std::string render(const bar_chart& chart);

// Text made safe for XML and HTML content and attribute values.
[[nodiscard]] std::string escape(std::string_view text);

// The i-th colour of the palette (it repeats after ten).
[[nodiscard]] std::string palette(std::size_t index);

}  // namespace syncmem::tool::svg
