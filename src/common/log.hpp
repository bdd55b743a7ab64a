#pragma once

// The library's logger: spdlog, named "syncmem", writing to stderr. Its level
// comes from SYNCMEM_LOG_LEVEL (trace, debug, info, warn, error, off; default
// warn). The logger is never destroyed, so that objects destroyed after main()
// can still report.

#include <spdlog/logger.h>

namespace syncmem::detail {

[[nodiscard]] spdlog::logger& logger() noexcept;

}  // namespace syncmem::detail
