#include "syncmem/compat/check_runtime.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "backend/backend.hpp"

namespace syncmem::compat {

std::string runtime_error_text(int code, const char* op, const char* file, int line) {
  return fmt::format("runtime error {}:{}  {} failed. \n  code = {}, message = {}", file, line, op,
                     syncmem::detail::cuda_error_name(code), syncmem::detail::cuda_error_message(code));
}

bool check_runtime(int code, const char* op, const char* file, int line) {
  if (code == 0) return true;
  syncmem::detail::cuda_clear_last_error();
  const auto text = runtime_error_text(code, op, file, line) + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  return false;
}

}  // namespace syncmem::compat
