#pragma once

// The library's logger: spdlog, named "syncmem", writing to stderr. Its level
// comes from SYNCMEM_LOG_LEVEL (trace, debug, info, warn, error, critical, off;
// default warn; another value is reported and leaves it at warn). The logger
// is never destroyed, so that objects destroyed after main() can still report.

#include <exception>
#include <utility>

#include <spdlog/logger.h>

namespace syncmem::detail {

[[nodiscard]] spdlog::logger& logger() noexcept;

// Whether `e` only says that the CUDA runtime is shutting down (at process
// exit): code on noexcept paths reports nothing then.
[[nodiscard]] bool is_shutdown_error(const std::exception& e) noexcept;

// Logs an error caught on a noexcept path, unless it only says that the CUDA
// runtime is shutting down.
template <class... Args>
void report_failure(const std::exception& e, spdlog::format_string_t<Args...> format, Args&&... args) noexcept {
  if (is_shutdown_error(e)) return;
  try {
    logger().error(format, std::forward<Args>(args)...);
  } catch (...) {  // NOLINT(bugprone-empty-catch): reporting must not throw
  }
}

}  // namespace syncmem::detail
