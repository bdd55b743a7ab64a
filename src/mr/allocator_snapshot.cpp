#include "syncmem/mr/allocator_snapshot.hpp"

#include <cstdint>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace syncmem::mr {

std::string to_string(block_state state) {
  switch (state) {
    case block_state::allocated:
      return "allocated";
    case block_state::free:
      return "free";
    case block_state::pending:
      return "pending";
  }
  return "free";
}

std::string to_string(segment_pool pool) {
  switch (pool) {
    case segment_pool::small:
      return "small";
    case segment_pool::large:
      return "large";
    case segment_pool::expandable:
      return "expandable";
    case segment_pool::graph:
      return "graph";
  }
  return "large";
}

namespace {
std::string stream_text(const std::optional<stream_view>& s) {
  return s ? fmt::format("{:#x}", static_cast<std::uintptr_t>(s->handle())) : std::string{"none"};
}
}  // namespace

std::string allocator_snapshot::to_json(int indent) const {
  nlohmann::ordered_json out;
  out["format"] = "syncmem.snapshot/1";
  out["device"] = device;
  out["resource"] = resource;
  out["captured_at"] = captured_at;
  out["totals"] = {{"reserved", reserved}, {"allocated", allocated}, {"free", free}, {"pending", pending}};
  out["segments"] = nlohmann::ordered_json::array();
  for (const auto& s : segments) {
    nlohmann::ordered_json seg;
    seg["address"] = fmt::format("{:#x}", s.address);
    seg["size"] = s.size;
    seg["stream"] = stream_text(s.stream);
    seg["pool"] = to_string(s.pool);
    seg["blocks"] = nlohmann::ordered_json::array();
    for (const auto& b : s.blocks) {
      seg["blocks"].push_back({{"offset", b.offset},
                               {"size", b.size},
                               {"state", std::string{to_string(b.state)}},
                               {"requested", b.requested},
                               {"label", b.label},
                               {"stream", stream_text(b.stream)}});
    }
    out["segments"].push_back(std::move(seg));
  }
  return out.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace syncmem::mr
