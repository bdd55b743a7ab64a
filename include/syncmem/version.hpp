#pragma once

/// @file version.hpp
/// @brief The library's version and what this build of it contains.

#include <string>

#define SYNCMEM_VERSION_MAJOR 0
#define SYNCMEM_VERSION_MINOR 1
#define SYNCMEM_VERSION_PATCH 0

namespace syncmem {

/// @brief What the library was built with, read at run time (not a macro, so
/// that code compiled against the headers sees the library it links).
struct build_info {
  std::string version;           ///< "major.minor.patch"
  bool cuda_enabled = false;     ///< whether the CUDA backend was compiled in
  int cuda_runtime_version = 0;  ///< e.g. 13000; 0 without CUDA
  int cuda_driver_version = 0;   ///< 0 without CUDA or without a driver
  std::string compiler;          ///< the host compiler that built the library
  std::string build_type;        ///< CMake build type
};

/// @brief Returns what this build of syncmem contains.
[[nodiscard]] build_info get_build_info();

}  // namespace syncmem
