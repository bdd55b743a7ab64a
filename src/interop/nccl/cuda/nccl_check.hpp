#pragma once

// NCCL results as syncmem errors: a syncmem::cuda_error naming the call, file
// and line, NCCL's error name and its message (with ncclGetLastError's detail).

#include <nccl.h>

namespace syncmem::nccl::detail {

[[noreturn]] void throw_nccl_error(ncclResult_t result, const char* call, const char* file, int line);
void report_nccl_failure(ncclResult_t result, const char* call, const char* file, int line) noexcept;
// "ncclInvalidArgument", ...
[[nodiscard]] const char* nccl_error_name(ncclResult_t result) noexcept;

}  // namespace syncmem::nccl::detail

#define SYNCMEM_NCCL_TRY(call)                                                                    \
  do {                                                                                            \
    const ncclResult_t syncmem_nccl_status_ = (call);                                             \
    if (syncmem_nccl_status_ != ncclSuccess) [[unlikely]] {                                       \
      ::syncmem::nccl::detail::throw_nccl_error(syncmem_nccl_status_, #call, __FILE__, __LINE__); \
    }                                                                                             \
  } while (false)

#define SYNCMEM_NCCL_CHECK_NOEXCEPT(call)                                                            \
  do {                                                                                               \
    const ncclResult_t syncmem_nccl_status_ = (call);                                                \
    if (syncmem_nccl_status_ != ncclSuccess) [[unlikely]] {                                          \
      ::syncmem::nccl::detail::report_nccl_failure(syncmem_nccl_status_, #call, __FILE__, __LINE__); \
    }                                                                                                \
  } while (false)
