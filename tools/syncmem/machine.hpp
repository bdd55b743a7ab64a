#pragma once

#include <nlohmann/json.hpp>

namespace syncmem::tool {

// The build and every device, as `syncmem info --json` prints it and as the
// bench report embeds it.
[[nodiscard]] nlohmann::json describe_machine();

// "13.0" from 13000; "none" from 0.
[[nodiscard]] std::string cuda_version_text(int version);

}  // namespace syncmem::tool
