#include "snapshot.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "files.hpp"
#include "json_input.hpp"
#include "report_format.hpp"

namespace syncmem::tool {
namespace {

std::string optional_string(const json_at& j, std::string_view key) {
  return j.has(key) ? j.at(key).string() : std::string{};
}

bool is_hex_address(const std::string& s) {
  if (s.size() < 3 || s.size() > 18 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return false;
  return std::all_of(s.begin() + 2, s.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

block_state parse_state(const json_at& j) {
  const std::string s = j.string();
  if (s == "allocated") return block_state::allocated;
  if (s == "free") return block_state::free;
  if (s == "pending") return block_state::pending;
  j.fail(fmt::format("unknown block state \"{}\" (expected allocated, free or pending)", s));
}

snapshot_block parse_block(const json_at& j) {
  j.expect_object();
  snapshot_block b;
  b.offset = j.at("offset").unsigned_integer();
  b.size = j.at("size").unsigned_integer();
  if (b.size == 0) j.at("size").fail("a block cannot be empty");
  b.state = parse_state(j.at("state"));
  if (j.has("requested")) {
    b.requested = j.at("requested").unsigned_integer();
    if (*b.requested > b.size) {
      j.at("requested")
          .fail(fmt::format("{} bytes requested is more than the block's size of {}", *b.requested, b.size));
    }
  }
  b.label = optional_string(j, "label");
  b.stream = optional_string(j, "stream");
  return b;
}

snapshot_segment parse_segment(const json_at& j, snapshot& s) {
  j.expect_object();
  snapshot_segment seg;
  seg.address = j.at("address").string();
  if (!is_hex_address(seg.address)) {
    j.at("address").fail(fmt::format("\"{}\" is not an address like \"0x7f0000000000\"", seg.address));
  }
  seg.size = j.at("size").unsigned_integer();
  if (seg.size == 0) j.at("size").fail("a segment cannot be empty");
  seg.stream = optional_string(j, "stream");
  seg.pool = optional_string(j, "pool");
  const json_at blocks = j.at("blocks");
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const json_at bj = blocks.at(i);
    snapshot_block b = parse_block(bj);
    if (b.offset > seg.size || b.size > seg.size - b.offset) {
      bj.fail(
          fmt::format("the block (offset {}, size {}) ends past its segment's size of {}", b.offset, b.size, seg.size));
    }
    seg.blocks.push_back(std::move(b));
  }
  std::stable_sort(seg.blocks.begin(), seg.blocks.end(),
                   [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < seg.blocks.size(); ++i) {
    const auto& b = seg.blocks[i];
    if (i > 0 && b.offset < seg.blocks[i - 1].offset + seg.blocks[i - 1].size) {
      j.at("blocks").fail(fmt::format("blocks overlap: one at offset {} (size {}) and one at offset {}",
                                      seg.blocks[i - 1].offset, seg.blocks[i - 1].size, b.offset));
    }
    covered += b.size;
    switch (b.state) {
      case block_state::allocated:
        s.totals.allocated += b.size;
        break;
      case block_state::free:
        s.totals.free += b.size;
        break;
      case block_state::pending:
        s.totals.pending += b.size;
        break;
    }
  }
  if (covered != seg.size) {
    s.warnings.push_back(fmt::format("{}: the blocks cover {} of the segment's {}; the rest is drawn empty", j.path(),
                                     format_bytes(covered), format_bytes(seg.size)));
  }
  s.totals.reserved += seg.size;
  return seg;
}

}  // namespace

snapshot snapshot_from_json(const nlohmann::json& document, const std::string& source) {
  const json_at root{document, source, ""};
  if (!document.is_object() || !document.contains("format")) {
    root.fail(fmt::format("not an allocator snapshot: expected an object with \"format\": \"{}\"", snapshot_format));
  }
  const std::string format = root.at("format").string();
  if (format != snapshot_format) {
    root.fail(fmt::format("unknown format \"{}\": this syncmem reads \"{}\"", format, snapshot_format));
  }
  snapshot s;
  s.device = optional_string(root, "device");
  s.resource = optional_string(root, "resource");
  s.captured_at = optional_string(root, "captured_at");
  const json_at segments = root.at("segments");
  for (std::size_t i = 0; i < segments.size(); ++i) s.segments.push_back(parse_segment(segments.at(i), s));
  if (root.has("totals")) {
    const json_at t = root.at("totals");
    t.expect_object();
    snapshot_totals d;
    d.reserved = t.has("reserved") ? t.at("reserved").unsigned_integer() : s.totals.reserved;
    d.allocated = t.has("allocated") ? t.at("allocated").unsigned_integer() : s.totals.allocated;
    d.free = t.has("free") ? t.at("free").unsigned_integer() : s.totals.free;
    d.pending = t.has("pending") ? t.at("pending").unsigned_integer() : s.totals.pending;
    s.declared = d;
    const std::pair<const char*, std::pair<std::uint64_t, std::uint64_t>> checks[] = {
        {"reserved", {d.reserved, s.totals.reserved}},
        {"allocated", {d.allocated, s.totals.allocated}},
        {"free", {d.free, s.totals.free}},
        {"pending", {d.pending, s.totals.pending}}};
    for (const auto& [name, values] : checks) {
      if (values.first != values.second) {
        s.warnings.push_back(
            fmt::format("totals.{} says {} bytes, the segments add up to {} bytes", name, values.first, values.second));
      }
    }
  }
  return s;
}

snapshot load_snapshot(const std::string& path) {
  return snapshot_from_json(parse_json(read_file(path, "snapshot"), path), path);
}

}  // namespace syncmem::tool
