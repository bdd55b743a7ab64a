#include "view_command.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "files.hpp"
#include "report_format.hpp"
#include "snapshot.hpp"
#include "snapshot_html.hpp"

namespace syncmem::tool {

void add_view_command(CLI::App& app, view_options& options) {
  auto* cmd = app.add_subcommand("view", "Draw an allocator snapshot (segments, blocks by state, labels) as HTML");
  add_page_arguments(*cmd, options.snapshot_path, "SNAPSHOT.json",
                     "A snapshot written by a syncmem allocator (syncmem.snapshot/1)", options.output_path);
}

int run_view(const view_options& options) {
  const std::string output = page_path(options.snapshot_path, options.output_path, "snapshot");
  const snapshot s = load_snapshot(options.snapshot_path);
  for (const auto& w : s.warnings) fmt::print(stderr, "syncmem view: warning: {}\n", w);
  write_file(output, render_snapshot_html(s, options.snapshot_path));
  std::size_t blocks = 0;
  for (const auto& seg : s.segments) blocks += seg.blocks.size();
  fmt::print("{}{}: {}, {}; reserved {}, allocated {}, pending {}, free {}\nWrote {}\n",
             s.resource.empty() ? options.snapshot_path : s.resource, s.device.empty() ? "" : " on " + s.device,
             counted(s.segments.size(), "segment"), counted(blocks, "block"), format_bytes(s.totals.reserved),
             format_bytes(s.totals.allocated), format_bytes(s.totals.pending), format_bytes(s.totals.free), output);
  return 0;
}

}  // namespace syncmem::tool
