#include "html_page.hpp"

#include <fmt/format.h>

#include "svg_plot.hpp"

namespace syncmem::tool {
namespace {

constexpr const char* style = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 24px auto;
       max-width: 1180px; padding: 0 16px; color: #222; background: #fafafa; line-height: 1.4; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 16px; margin: 18px 0 6px; }
.meta { color: #555; margin: 0 0 12px; }
.notice { border: 2px solid #c0392b; background: #fdecea; color: #7b1d13; padding: 10px 14px; border-radius: 6px;
          font-weight: 600; margin: 12px 0; }
.source { border: 1px solid #8fbc8f; background: #eef7ee; padding: 8px 14px; border-radius: 6px; margin: 12px 0; }
.warning { border: 1px solid #d4a017; background: #fff8e1; padding: 8px 14px; border-radius: 6px; margin: 12px 0; }
table { border-collapse: collapse; margin: 8px 0 12px; background: #fff; }
th, td { border: 1px solid #ddd; padding: 4px 10px; text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f0f0f0; }
td.name, th.name, table.kv td, table.kv th { text-align: left; }
td.ours, th.ours { font-weight: 600; }
td.better { color: #1e7b34; font-weight: 600; }
td.worse { color: #a0301c; }
td.failed { color: #a0301c; font-weight: 600; }
svg.plot { display: block; margin: 8px 0 16px; border: 1px solid #e0e0e0; border-radius: 4px; background: #fff;
           max-width: 100%; height: auto; }
details { margin: 8px 0; }
pre { background: #fff; border: 1px solid #ddd; padding: 8px; overflow-x: auto; font-size: 12px; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }
footer { margin-top: 36px; color: #777; font-size: 13px; }
)";

}  // namespace

std::string html_page(const std::string& title, const std::string& body) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n{}\n</body>\n</html>\n",
      svg::escape(title), style, body);
}

}  // namespace syncmem::tool
