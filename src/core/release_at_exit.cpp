#include "core/release_at_exit.hpp"

#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/ignored_failure.hpp"
#include "core/log.hpp"

namespace syncmem::detail {
namespace {

struct exit_list {
  std::mutex mutex;
  std::vector<std::function<void()>> releases;
};

exit_list& list() {
  static auto* const l = new exit_list{};  // never destroyed: read at exit
  return *l;
}

void run_releases() noexcept {
  std::vector<std::function<void()>> releases;
  {
    std::lock_guard lock{list().mutex};
    releases.swap(list().releases);
  }
  for (auto it = releases.rbegin(); it != releases.rend(); ++it) {
    try {
      (*it)();
    } catch (const std::exception& e) {
      report_failure(e, "releasing cached memory at exit failed: {}", e.what());
    } catch (...) {
      // at exit, nothing more to do
      log_ignored("releasing cached memory at exit");
    }
  }
}

}  // namespace

void release_at_exit(std::function<void()> release) {
  static std::once_flag armed;
  // Registered when the first cache is made: by then the CUDA runtime has
  // registered its own exit handler, so this one runs before it.
  std::call_once(armed, [] { std::atexit(run_releases); });
  std::lock_guard lock{list().mutex};
  list().releases.push_back(std::move(release));
}

}  // namespace syncmem::detail
