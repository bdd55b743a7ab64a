#include "core/ignored_failure.hpp"

#include <exception>

#include "core/log.hpp"

namespace syncmem::detail {

void log_ignored(std::string_view doing, spdlog::level::level_enum level) noexcept {
  try {
    auto& log = logger();
    if (!log.should_log(level)) return;  // the common case costs no rethrow
    const std::exception_ptr failure = std::current_exception();
    if (!failure) {
      log.log(level, "ignored a failure while {}", doing);
      return;
    }
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      if (is_shutdown_error(e)) return;
      log.log(level, "ignored a failure while {}: {}", doing, e.what());
    } catch (...) {
      log.log(level, "ignored a failure while {}: an exception of unknown type", doing);
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): the report of an ignored failure is itself best-effort
  }
}

}  // namespace syncmem::detail
