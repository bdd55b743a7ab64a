#include "syncmem/nccl/group.hpp"

#include <string>
#include <utility>

#include "comm_backend.hpp"
#include "core/log.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"

namespace syncmem::nccl {

namespace detail {

thread_group& this_thread_group() noexcept {
  thread_local thread_group g;
  return g;
}

void launch_grouped(std::function<void()> launch) {
  auto& g = this_thread_group();
  if (g.depth == 0) {
    launch();
  } else {
    g.launches.push_back(std::move(launch));
  }
}

void after_enqueued(std::function<void()> f) {
  auto& g = this_thread_group();
  if (g.depth == 0) {
    f();
  } else {
    g.after_end.push_back(std::move(f));
  }
}

}  // namespace detail

namespace {
// Only CUDA ranks use NCCL; without a CUDA device no call can reach it, and
// NCCL is not asked to start.
bool uses_nccl() noexcept { return device_count(device_kind::cuda) > 0; }

// Ends one level: NCCL's group where it was started, then, at the outermost
// level, what waited for the calls to be enqueued. Returns NCCL's error, or "".
std::string close_group() noexcept {
  const std::string error = uses_nccl() ? detail::nccl_group_end() : std::string{};
  auto& g = detail::this_thread_group();
  if (--g.depth == 0) {
    auto launches = std::move(g.launches);
    auto after = std::move(g.after_end);
    g.launches.clear();
    g.after_end.clear();
    for (auto* list : {&launches, &after}) {
      for (auto& f : *list) {
        try {
          f();
        } catch (const std::exception& e) {
          syncmem::detail::report_failure(e, "nccl::group: enqueueing at the end of the group failed: {}", e.what());
        }
      }
    }
  }
  return error;
}

}  // namespace

group::group() {
  if (uses_nccl()) detail::nccl_group_start();
  ++detail::this_thread_group().depth;
}

group::~group() {
  if (!open_) return;
  open_ = false;
  const std::string error = close_group();
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
  const std::string error = close_group();
  if (!error.empty()) SYNCMEM_FAIL("nccl::group::end: " + error);
}

}  // namespace syncmem::nccl
