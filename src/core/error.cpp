#include "syncmem/error.hpp"

#include <cstring>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/log.hpp"

namespace syncmem {

device_error::device_error(const std::string& message, device_kind kind, std::string_view backend, int code)
    : std::runtime_error{message}, backend_{std::make_shared<const std::string>(backend)}, code_{code}, kind_{kind} {}

cuda_error::cuda_error(int code, std::string_view error_name, std::string_view error_message, std::string_view call,
                       std::string_view file, int line, std::string_view backend)
    : device_error{fmt::format("CUDA runtime error at {}:{}: {} failed: code = {} ({}), message = {}", file, line, call,
                               error_name, code, error_message),
                   device_kind::cuda, backend, code},
      details_{std::make_shared<const details_type>(
          details_type{std::string{error_name}, std::string{error_message}, std::string{call}, std::string{file}})},
      line_{line} {}

system_error::system_error(int error, std::string_view message) : system_error{error, message, {}, 0} {}

system_error::system_error(int error, std::string_view message, std::string_view file, int line)
    : std::system_error{error, std::generic_category()} {
  std::string text = fmt::format("syncmem: {}: {}", message, code().message());
  if (!file.empty()) text += fmt::format(" [{}:{}]", file, line);
  message_ = std::make_shared<const std::string>(std::move(text));
}

namespace {

std::string describe(const oom_info& info, std::string_view file, int line) {
  std::string text = fmt::format("syncmem: out of memory: {} failed to allocate {}",
                                 info.resource.empty() ? std::string{"allocation"} : info.resource,
                                 detail::format_bytes(info.requested));
  text += info.device ? fmt::format(" on {}", to_string(*info.device)) : std::string{" of host memory"};
  if (!info.label.empty()) text += fmt::format(" for '{}'", info.label);
  auto add = [&text](const char* what, const std::optional<std::size_t>& value) {
    if (value) text += fmt::format("; {} {}", what, detail::format_bytes(*value));
  };
  add("device free", info.device_free);
  add("of total", info.device_total);
  add("reserved by the allocator", info.reserved);
  add("in use", info.in_use);
  add("largest free block", info.largest_free_block);
  add("limit", info.limit);
  if (!info.hint.empty()) text += fmt::format(". {}", info.hint);
  if (!file.empty()) text += fmt::format(" [{}:{}]", file, line);
  return text;
}

}  // namespace

out_of_memory::out_of_memory(oom_info info) : out_of_memory{std::move(info), {}, 0} {}

out_of_memory::out_of_memory(oom_info info, std::string_view file, int line) {
  auto message = describe(info, file, line);
  state_ = std::make_shared<const state_type>(state_type{std::move(info), std::string{file}, line, std::move(message)});
}

out_of_memory out_of_memory::with_label(std::string label) const {
  oom_info copy = state_->info;
  copy.label = std::move(label);
  return out_of_memory{std::move(copy), state_->file, state_->line};
}

namespace detail {

std::string_view short_path(const char* file) noexcept {
  std::string_view path{file};
  for (const char* root : {"/src/", "/include/", "/tests/", "/tools/", "/bench/", "/examples/", "/fuzz/"}) {
    if (auto pos = path.rfind(root); pos != std::string_view::npos) return path.substr(pos + 1);
  }
  return path;
}

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {} ({} bytes)", value, units[unit], bytes);
}

std::string stamp(std::string_view message, const char* file, int line) {
  return fmt::format("syncmem: {} [{}:{}]", message, short_path(file), line);
}

void throw_logic_error(std::string_view message, const char* file, int line) {
  throw logic_error{stamp(message, file, line)};
}

void throw_unsupported(std::string_view message, const char* file, int line) {
  throw unsupported_error{stamp(message, file, line)};
}

void throw_system_error(int error, std::string_view message, const char* file, int line) {
  throw system_error{error, message, short_path(file), line};
}

void throw_out_of_memory(oom_info info, const char* file, int line) {
  throw out_of_memory{std::move(info), short_path(file), line};
}

void throw_cuda_error(int code, const char* call, const char* file, int line) {
  cuda_clear_last_error();
  throw cuda_error{code, cuda_error_name(code), cuda_error_message(code), call, short_path(file), line};
}

bool is_shutdown_error(const std::exception& e) noexcept {
  const auto* cuda = dynamic_cast<const cuda_error*>(&e);
  return cuda != nullptr && cuda_is_shutting_down(cuda->code());
}

void report_noexcept_failure(int code, const char* call, const char* file, int line) noexcept {
  cuda_clear_last_error();
  if (cuda_is_shutting_down(code)) return;  // at exit; nothing left to free
  try {
    logger().error("{} failed at {}:{}: {} ({})", call, short_path(file), line, cuda_error_name(code),
                   cuda_error_message(code));
  } catch (...) {  // NOLINT(bugprone-empty-catch): reporting must not throw
  }
}

}  // namespace detail
}  // namespace syncmem
