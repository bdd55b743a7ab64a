#include "syncmem/nccl/group.hpp"

#include "comm_backend.hpp"
#include "core/log.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"

namespace syncmem::nccl {

namespace {
// Only CUDA ranks use NCCL; without a CUDA device no call can reach it, and
// NCCL is not asked to start.
bool uses_nccl() noexcept { return device_count(device_kind::cuda) > 0; }
}  // namespace

group::group() {
  if (uses_nccl()) detail::nccl_group_start();
}

group::~group() {
  if (!open_) return;
  open_ = false;
  if (!uses_nccl()) return;
  const std::string error = detail::nccl_group_end();
  if (!error.empty()) {
    try {
      syncmem::detail::logger().error("nccl::group: {}", error);
    } catch (...) {  // NOLINT(bugprone-empty-catch): reporting must not throw
    }
  }
}

void group::end() {
  SYNCMEM_EXPECTS(open_, "nccl::group::end: the group has ended already");
  open_ = false;
  if (!uses_nccl()) return;
  const std::string error = detail::nccl_group_end();
  if (!error.empty()) SYNCMEM_FAIL("nccl::group::end: " + error);
}

}  // namespace syncmem::nccl
