#pragma once

/// @file compat/check_runtime.hpp
/// @brief tensorRT_Pro's `checkRuntime(op)`, reporting like the original.
///
/// `checkRuntime(cudaMalloc(&p, n))` evaluates the call; when it fails it
/// prints, as the seed did,
///
///     runtime error FILE:LINE  OP failed.
///       code = cudaErrorMemoryAllocation, message = out of memory
///
/// and yields false (true on success). Unlike the original it needs no CUDA
/// header itself, and the line goes to syncmem's logger's stream (stderr) in one
/// write. Code that wants an exception instead uses SYNCMEM_CUDA_TRY.

#include <string>

namespace syncmem::compat {

/// @brief The check behind checkRuntime: `code` is a cudaError_t value.
bool check_runtime(int code, const char* op, const char* file, int line);

/// @brief What checkRuntime prints for a failure (without the newline).
[[nodiscard]] std::string runtime_error_text(int code, const char* op, const char* file, int line);

}  // namespace syncmem::compat

#ifndef checkRuntime
#define checkRuntime(op) ::syncmem::compat::check_runtime(static_cast<int>(op), #op, __FILE__, __LINE__)
#endif
