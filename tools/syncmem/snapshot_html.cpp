#include "snapshot_html.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "html_page.hpp"
#include "report_format.hpp"
#include "svg_plot.hpp"

namespace syncmem::tool {
namespace {

using svg::escape;

constexpr double bar_width = 1040;
constexpr double margin = 12;
constexpr double char_width = 6.6;

const char* fill(block_state s) {
  switch (s) {
    case block_state::allocated:
      return "#4e79a7";
    case block_state::pending:
      return "#f28e2b";
    case block_state::free:
      return "#dcdcdc";
  }
  return "#ffffff";
}

const char* text_color(block_state s) { return s == block_state::free ? "#333" : "#fff"; }

std::string state_words(block_state s) {
  switch (s) {
    case block_state::allocated:
      return "allocated";
    case block_state::pending:
      return "pending (freed, waiting for a stream)";
    case block_state::free:
      return "free";
  }
  return "";
}

std::string px(double v) { return fmt::format("{:.1f}", v); }

std::string percent(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? std::string{"–"}
                    : fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string legend_html() {
  std::string out = "<p class=\"legend\">";
  for (auto s : {block_state::allocated, block_state::pending, block_state::free}) {
    out += fmt::format("<span class=\"swatch\" style=\"background:{}\"></span>{} &nbsp; ", fill(s),
                       escape(state_words(s)));
  }
  return out + "</p>";
}

std::string totals_svg(const snapshot& s) {
  const double height = 44;
  std::string out =
      fmt::format(R"(<svg class="plot" data-plot="totals" xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" )"
                  R"(viewBox="0 0 {0} {1}" role="img" aria-label="reserved memory by state">)",
                  bar_width + 2 * margin, height);
  out += fmt::format(R"(<rect x="0" y="0" width="{}" height="{}" fill="#ffffff"/>)", bar_width + 2 * margin, height);
  double x = margin;
  const double reserved = static_cast<double>(std::max<std::uint64_t>(s.totals.reserved, 1));
  const std::pair<block_state, std::uint64_t> parts[] = {{block_state::allocated, s.totals.allocated},
                                                         {block_state::pending, s.totals.pending},
                                                         {block_state::free, s.totals.free}};
  for (const auto& [state, bytes] : parts) {
    if (bytes == 0) continue;
    const double w = std::max(1.0, static_cast<double>(bytes) / reserved * bar_width);
    const std::string text =
        fmt::format("{} {} ({})", to_string(state), format_bytes(bytes), percent(bytes, s.totals.reserved));
    out += fmt::format(R"(<rect x="{}" y="8" width="{}" height="28" fill="{}" stroke="#fff"><title>{}</title></rect>)",
                       px(x), px(w), fill(state), escape(text));
    if (static_cast<double>(display_width(text)) * char_width + 8 < w) {
      out += fmt::format(R"(<text x="{}" y="26" font-size="12" fill="{}">{}</text>)", px(x + 5), text_color(state),
                         escape(text));
    }
    x += w;
  }
  return out + "</svg>";
}

std::string block_title(const snapshot_segment& seg, const snapshot_block& b) {
  std::string t =
      fmt::format("{}{}: {}", b.label.empty() ? "" : b.label + " — ", state_words(b.state), format_bytes(b.size));
  if (b.requested) t += fmt::format(" (requested {})", format_bytes(*b.requested));
  t += fmt::format("\noffset {} in segment {}", b.offset, seg.address);
  if (!b.stream.empty()) t += fmt::format("\nstream {}", b.stream);
  return t;
}

// Where each block of a segment is drawn (x from the bar's start, width):
// to scale, except that blocks too small to see are widened to a few pixels,
// the space they take coming from the larger pieces. When there are too many
// small blocks for that, plainly to scale with one pixel at least.
std::vector<std::pair<double, double>> block_widths(const snapshot_segment& seg) {
  constexpr double min_width = 4;
  const double size = static_cast<double>(seg.size);
  // Pieces: the blocks in order, and the gaps no block describes.
  struct piece {
    double bytes;
    bool block;
  };
  std::vector<piece> pieces;
  std::uint64_t at = 0;
  for (const auto& b : seg.blocks) {
    if (b.offset > at) pieces.push_back({static_cast<double>(b.offset - at), false});
    pieces.push_back({static_cast<double>(b.size), true});
    at = b.offset + b.size;
  }
  if (at < seg.size) pieces.push_back({static_cast<double>(seg.size - at), false});
  double widened = 0;
  double rest = 0;
  for (const auto& p : pieces) {
    if (p.block && p.bytes / size * bar_width < min_width) {
      widened += min_width;
    } else {
      rest += p.bytes;
    }
  }
  const bool fits = widened < bar_width / 2 && rest > 0;
  std::vector<std::pair<double, double>> out;
  double x = 0;
  for (const auto& p : pieces) {
    double w = p.bytes / size * bar_width;
    if (fits) w = p.block && w < min_width ? min_width : p.bytes / rest * (bar_width - widened);
    if (p.block) out.emplace_back(x, std::max(1.0, w));
    x += w;
  }
  return out;
}

std::string segments_svg(const snapshot& s) {
  constexpr double row = 62;
  const double height = std::max(1.0, static_cast<double>(s.segments.size())) * row + 8;
  std::string out = fmt::format(
      R"(<svg class="plot" data-plot="segments" xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" )"
      R"(viewBox="0 0 {0} {1}" role="img" aria-label="segments and their blocks">)",
      bar_width + 2 * margin, height);
  out += fmt::format(R"(<rect x="0" y="0" width="{}" height="{}" fill="#ffffff"/>)", bar_width + 2 * margin, height);
  double y = 8;
  for (std::size_t i = 0; i < s.segments.size(); ++i) {
    const auto& seg = s.segments[i];
    std::string heading = fmt::format("segment {} · {} · {}", i, seg.address, format_bytes(seg.size));
    if (!seg.pool.empty()) heading += fmt::format(" · {} pool", seg.pool);
    if (!seg.stream.empty()) heading += fmt::format(" · stream {}", seg.stream);
    heading += " · " + counted(seg.blocks.size(), "block");
    out += fmt::format(R"(<g class="segment" data-address="{}">)", escape(seg.address));
    out +=
        fmt::format(R"(<text x="{}" y="{}" font-size="12" fill="#222">{}</text>)", margin, px(y + 12), escape(heading));
    const double top = y + 18;
    // The segment's outline; space no block describes stays white.
    out += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="30" fill="#ffffff" stroke="#999"/>)", margin, px(top),
                       bar_width);
    const auto widths = block_widths(seg);
    for (std::size_t k = 0; k < seg.blocks.size(); ++k) {
      const auto& b = seg.blocks[k];
      const double x = margin + widths[k].first;
      const double w = widths[k].second;
      out += fmt::format(R"(<rect class="block {}" x="{}" y="{}" width="{}" height="30" fill="{}" stroke="#ffffff" )"
                         R"(stroke-width="{}"><title>{}</title></rect>)",
                         to_string(b.state), px(x), px(top), px(w), fill(b.state), w > 3 ? 1 : 0,
                         escape(block_title(seg, b)));
      std::string text = b.label.empty() ? format_bytes(b.size) : fmt::format("{} {}", b.label, format_bytes(b.size));
      if (static_cast<double>(display_width(text)) * char_width + 6 > w) {
        text = b.label;  // the size is in the tooltip and the table
      }
      if (!text.empty() && static_cast<double>(display_width(text)) * char_width + 6 <= w) {
        out += fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="{}">{}</text>)", px(x + 3), px(top + 19),
                           text_color(b.state), escape(text));
      }
    }
    out += "</g>";
    y += row;
  }
  return out + "</svg>";
}

std::string totals_table(const snapshot& s) {
  std::uint64_t largest_free = 0;
  std::size_t blocks = 0;
  for (const auto& seg : s.segments) {
    blocks += seg.blocks.size();
    for (const auto& b : seg.blocks) {
      if (b.state == block_state::free) largest_free = std::max(largest_free, b.size);
    }
  }
  const auto& t = s.totals;
  std::string out = "<table class=\"kv totals\">";
  auto row = [&out](const std::string& k, const std::string& v) {
    out += fmt::format("<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
  };
  row("reserved", fmt::format("{} in {}", format_bytes(t.reserved), counted(s.segments.size(), "segment")));
  row("allocated", fmt::format("{} ({} of reserved)", format_bytes(t.allocated), percent(t.allocated, t.reserved)));
  row("pending", fmt::format("{} ({}): freed, waiting for a stream before reuse", format_bytes(t.pending),
                             percent(t.pending, t.reserved)));
  row("free", fmt::format("{} ({})", format_bytes(t.free), percent(t.free, t.reserved)));
  row("blocks", fmt::format("{}", blocks));
  row("largest free block", format_bytes(largest_free));
  if (t.free > 0) {
    row("free memory fragmentation",
        fmt::format("{:.1f}% (1 − largest free block / free)",
                    100.0 * (1.0 - static_cast<double>(largest_free) / static_cast<double>(t.free))));
  }
  return out + "</table>";
}

std::string labels_table(const snapshot& s) {
  struct use {
    std::uint64_t bytes = 0;
    std::uint64_t requested = 0;
    std::size_t blocks = 0;
  };
  std::map<std::string, use> by_label;
  for (const auto& seg : s.segments) {
    for (const auto& b : seg.blocks) {
      if (b.state != block_state::allocated) continue;
      auto& u = by_label[b.label.empty() ? std::string{"(no label)"} : b.label];
      u.bytes += b.size;
      u.requested += b.requested.value_or(b.size);
      ++u.blocks;
    }
  }
  if (by_label.empty()) return "<p>Nothing is allocated.</p>";
  std::vector<std::pair<std::string, use>> sorted(by_label.begin(), by_label.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
  std::string out =
      "<table class=\"labels\"><tr><th class=\"name\">label</th><th>blocks</th><th>allocated</th>"
      "<th>requested</th><th>share of allocated</th></tr>";
  for (const auto& [label, u] : sorted) {
    out += fmt::format("<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", escape(label),
                       u.blocks, escape(format_bytes(u.bytes)), escape(format_bytes(u.requested)),
                       escape(percent(u.bytes, s.totals.allocated)));
  }
  return out + "</table>";
}

std::string blocks_tables(const snapshot& s) {
  std::string out;
  for (std::size_t i = 0; i < s.segments.size(); ++i) {
    const auto& seg = s.segments[i];
    out += fmt::format("<details><summary>segment {} · {} · {} · {}</summary>", i, escape(seg.address),
                       escape(format_bytes(seg.size)), counted(seg.blocks.size(), "block"));
    out +=
        "<table><tr><th>offset</th><th>size</th><th class=\"name\">state</th><th>requested</th>"
        "<th class=\"name\">label</th><th class=\"name\">stream</th></tr>";
    for (const auto& b : seg.blocks) {
      out += fmt::format(
          "<tr><td>{}</td><td>{}</td><td class=\"name\">{}</td><td>{}</td><td class=\"name\">{}</td>"
          "<td class=\"name\">{}</td></tr>",
          b.offset, escape(format_bytes(b.size)), to_string(b.state),
          b.requested ? escape(format_bytes(*b.requested)) : std::string{"–"}, escape(b.label), escape(b.stream));
    }
    out += "</table></details>";
  }
  return out;
}

}  // namespace

std::string render_snapshot_html(const snapshot& s, const std::string& source) {
  std::string body = "<h1>Allocator snapshot</h1>\n";
  std::vector<std::string> meta;
  if (!s.resource.empty()) meta.push_back(s.resource);
  if (!s.device.empty()) meta.push_back("device " + s.device);
  if (!s.captured_at.empty()) meta.push_back("captured " + s.captured_at);
  meta.push_back("from " + source);
  body += fmt::format("<p class=\"meta\">{}</p>\n", escape(fmt::format("{}", fmt::join(meta, " · "))));
  if (!s.warnings.empty()) {
    body += "<div class=\"warning\"><b>The snapshot is not consistent:</b><ul>";
    for (const auto& w : s.warnings) body += "<li>" + escape(w) + "</li>";
    body += "</ul></div>\n";
  }
  body += "<h2>Totals</h2>" + totals_table(s) + totals_svg(s) + legend_html() + "\n";
  body += "<h2>Segments</h2>";
  if (s.segments.empty()) {
    body += "<p>The allocator holds no segments.</p>";
  } else {
    body +=
        "<p>Each bar is one segment the allocator reserved from the device, its blocks drawn to scale (blocks "
        "too small to see are widened to a few pixels); hover over a block for its details.</p>";
    body += segments_svg(s) + legend_html();
  }
  body += "\n<h2>Allocated memory by label</h2>" + labels_table(s);
  if (!s.segments.empty()) body += "\n<h2>Every block</h2>" + blocks_tables(s);
  body += "\n<footer>Drawn by <code>syncmem view</code>.</footer>";
  return html_page("syncmem view: " + (s.resource.empty() ? source : s.resource), body);
}

}  // namespace syncmem::tool
