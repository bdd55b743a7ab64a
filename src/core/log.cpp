#include "core/log.hpp"

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace syncmem::detail {

spdlog::logger& logger() noexcept {
  // Leaked on purpose: see log.hpp.
  static spdlog::logger* const instance = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto* log = new spdlog::logger("syncmem", std::move(sink));
    log->set_pattern("syncmem: %l: %v");  // the "syncmem: " of every exception message, then the level
    spdlog::level::level_enum level = spdlog::level::warn;
    const char* text = std::getenv("SYNCMEM_LOG_LEVEL");
    const bool set = text != nullptr && *text != '\0';
    // spdlog reads an unknown name as "off", which would hide every report.
    const bool known = set && (spdlog::level::from_str(text) != spdlog::level::off || std::string_view{text} == "off");
    if (known) level = spdlog::level::from_str(text);
    log->set_level(level);
    if (set && !known) {
      log->warn(
          "SYNCMEM_LOG_LEVEL '{}' is not a level (trace, debug, info, warn, error, critical, off); logging at warn",
          text);
    }
    return log;
  }();
  return *instance;
}

}  // namespace syncmem::detail
