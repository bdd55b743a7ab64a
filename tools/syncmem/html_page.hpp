#pragma once

// The frame of every page the command writes: one self-contained HTML file
// (inline style, inline SVG, no script, nothing fetched from anywhere).

#include <string>

namespace syncmem::tool {

// A whole page with `title` and `body` (HTML, already escaped).
[[nodiscard]] std::string html_page(const std::string& title, const std::string& body);

}  // namespace syncmem::tool
