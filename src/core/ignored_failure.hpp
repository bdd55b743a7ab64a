#pragma once

// The one way to ignore a failure on purpose (in a destructor, a best-effort
// cleanup, an optional figure): it is logged, so nothing is lost silently, and
// nothing is thrown. Expected failures (the device is gone at teardown, no
// memory for a fallback's bookkeeping) log at debug level, so normal runs stay
// quiet; SYNCMEM_LOG_LEVEL=debug shows them.

#include <string_view>
#include <utility>

#include <spdlog/common.h>

namespace syncmem::detail {

// Logs the exception being handled as ignored while `doing` ("destroying an
// event of cuda:0"), with its message when it is a std::exception; call it
// from a catch block. Silent while the CUDA runtime shuts down; never throws.
void log_ignored(std::string_view doing, spdlog::level::level_enum level = spdlog::level::debug) noexcept;

// Runs `f`; a failure is logged by log_ignored and goes no further.
template <class F>
void ignore_failure(std::string_view doing, F&& f, spdlog::level::level_enum level = spdlog::level::debug) noexcept {
  try {
    std::forward<F>(f)();
  } catch (...) {
    log_ignored(doing, level);
  }
}

}  // namespace syncmem::detail
