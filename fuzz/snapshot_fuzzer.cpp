// The snapshot JSON that `syncmem view` reads: any input either renders a page
// or is refused with input_error (a clear message, exit status 2 in the
// command). Anything else thrown, or a crash, is a bug.

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "files.hpp"
#include "snapshot.hpp"
#include "snapshot_html.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto document = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return 0;  // not JSON: the command says so before the parser runs
  try {
    const auto snapshot = syncmem::tool::snapshot_from_json(document, "fuzz.json");
    const auto page = syncmem::tool::render_snapshot_html(snapshot, "fuzz.json");
    if (page.empty()) __builtin_trap();
  } catch (const syncmem::tool::input_error&) {}
  return 0;
}
