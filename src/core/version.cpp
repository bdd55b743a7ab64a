#include "syncmem/version.hpp"

#include <fmt/format.h>

#include "backend/backend.hpp"

#ifndef SYNCMEM_BUILD_TYPE
#define SYNCMEM_BUILD_TYPE "unknown"
#endif

namespace syncmem {

build_info get_build_info() {
  build_info info;
  info.version = fmt::format("{}.{}.{}", SYNCMEM_VERSION_MAJOR, SYNCMEM_VERSION_MINOR, SYNCMEM_VERSION_PATCH);
  info.cuda_enabled = detail::cuda_compiled();
  info.cuda_runtime_version = detail::cuda_runtime_version();
  info.cuda_driver_version = detail::cuda_driver_version();
#if defined(__clang__)
  info.compiler = fmt::format("clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  info.compiler = fmt::format("gcc {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  info.compiler = "unknown";
#endif
  info.build_type = SYNCMEM_BUILD_TYPE;
  return info;
}

}  // namespace syncmem
