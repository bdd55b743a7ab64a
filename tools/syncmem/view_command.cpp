#include "view_command.hpp"

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "files.hpp"
#include "report_format.hpp"
#include "snapshot.hpp"
#include "snapshot_html.hpp"

namespace syncmem::tool {

void add_view_command(CLI::App& app, view_options& options) {
  auto* cmd = app.add_subcommand("view", "Draw an allocator snapshot (segments, blocks by state, labels) as HTML");
  cmd->add_option("snapshot", options.snapshot_path, "A snapshot written by a syncmem allocator (syncmem.snapshot/1)")
      ->type_name("SNAPSHOT.json")
      ->required();
  cmd->add_option("-o,--output", options.output_path, "The page to write (default: SNAPSHOT with .html)")
      ->type_name("FILE");
}

int run_view(const view_options& options) {
  std::string output = options.output_path;
  if (output.empty()) output = std::filesystem::path{options.snapshot_path}.replace_extension(".html").string();
  if (output == options.snapshot_path)
    throw input_error{"-o: the page would overwrite the snapshot; name another file"};
  check_writable(output, "-o");
  const snapshot s = load_snapshot(options.snapshot_path);
  for (const auto& w : s.warnings) fmt::print(stderr, "syncmem view: warning: {}\n", w);
  write_file(output, render_snapshot_html(s, options.snapshot_path));
  std::size_t blocks = 0;
  for (const auto& seg : s.segments) blocks += seg.blocks.size();
  fmt::print("{}{}: {} segments, {} blocks; reserved {}, allocated {}, pending {}, free {}\nWrote {}\n",
             s.resource.empty() ? options.snapshot_path : s.resource, s.device.empty() ? "" : " on " + s.device,
             s.segments.size(), blocks, format_bytes(s.totals.reserved), format_bytes(s.totals.allocated),
             format_bytes(s.totals.pending), format_bytes(s.totals.free), output);
  return 0;
}

}  // namespace syncmem::tool
