#include "syncmem/nccl/group.hpp"

#include <cstdint>
#include <string>
#include <utility>

#include <fmt/format.h>

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

namespace {
bool overlap(const void* a, std::size_t an, const void* b, std::size_t bn) noexcept {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}
}  // namespace

void claim_memory(const memory_use& use) {
  auto& g = this_thread_group();
  if (g.depth == 0) return;
  for (const auto& earlier : g.uses) {
    const char* mine = "writes";
    const char* theirs = nullptr;
    if (overlap(use.c.recv, use.write_bytes, earlier.c.recv, earlier.write_bytes)) {
      theirs = "writes";
    } else if (overlap(use.c.recv, use.write_bytes, earlier.c.send, earlier.read_bytes)) {
      theirs = "reads";
    } else if (overlap(use.c.send, use.read_bytes, earlier.c.recv, earlier.write_bytes)) {
      mine = "reads";
      theirs = "writes";
    } else {
      continue;
    }
    SYNCMEM_FAIL(
        fmt::format("{}: {} {} memory that {} of {} {}, earlier in the same nccl::group; NCCL runs the "
                    "calls of a group together, in no order: end the group between them",
                    communicator_name(use.rank, use.size, use.device), describe(use.c), mine, describe(earlier.c),
                    communicator_name(earlier.rank, earlier.size, earlier.device), theirs));
  }
  g.uses.push_back(use);
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
    g.uses.clear();
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
