#include "core/log.hpp"

#include <cstdlib>
#include <memory>
#include <string>

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
    if (const char* text = std::getenv("SYNCMEM_LOG_LEVEL"); text != nullptr && *text != '\0') {
      level = spdlog::level::from_str(text);  // unknown names give "off"
    }
    log->set_level(level);
    return log;
  }();
  return *instance;
}

}  // namespace syncmem::detail
