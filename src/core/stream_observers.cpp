#include "core/stream_observers.hpp"

#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "core/log.hpp"

namespace syncmem::detail {
namespace {

struct registry {
  std::mutex mutex;
  std::vector<std::pair<std::uint64_t, stream_observer>> observers;
  std::uint64_t next_id = 1;
};

registry& observers() {
  static auto* const r = new registry{};  // never destroyed: streams may be destroyed after main()
  return *r;
}

}  // namespace

std::uint64_t add_stream_observer(stream_observer observer) {
  auto& r = observers();
  std::lock_guard lock{r.mutex};
  const auto id = r.next_id++;
  r.observers.emplace_back(id, std::move(observer));
  return id;
}

void remove_stream_observer(std::uint64_t id) noexcept {
  auto& r = observers();
  std::lock_guard lock{r.mutex};
  std::erase_if(r.observers, [id](const auto& entry) { return entry.first == id; });
}

void notify_stream_destroying(device_id device, stream_handle handle) noexcept {
  auto& r = observers();
  // Held during the calls, so that remove_stream_observer waits for a running one.
  std::lock_guard lock{r.mutex};
  for (auto& [id, observer] : r.observers) {
    try {
      observer(device, handle);
    } catch (const std::exception& e) {
      report_failure(e, "an observer of stream destruction failed: {}", e.what());
    } catch (...) {
      logger().error("an observer of stream destruction failed");
    }
  }
}

}  // namespace syncmem::detail
