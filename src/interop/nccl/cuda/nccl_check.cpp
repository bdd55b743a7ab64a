#include "nccl_check.hpp"

#include "core/log.hpp"
#include "syncmem/error.hpp"

namespace syncmem::nccl::detail {

const char* nccl_error_name(ncclResult_t result) noexcept {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult";
  }
}

void throw_nccl_error(ncclResult_t result, const char* call, const char* file, int line) {
  throw cuda_error{static_cast<int>(result),
                   nccl_error_name(result),
                   ncclGetErrorString(result),
                   call,
                   syncmem::detail::short_path(file),
                   line,
                   "nccl"};
}

void report_nccl_failure(ncclResult_t result, const char* call, const char* file, int line) noexcept {
  try {
    syncmem::detail::logger().error("{} failed at {}:{}: {} ({})", call, syncmem::detail::short_path(file), line,
                                    nccl_error_name(result), ncclGetErrorString(result));
  } catch (...) {  // NOLINT(bugprone-empty-catch): reporting must not throw
  }
}

}  // namespace syncmem::nccl::detail
