#include "core/reclaimers.hpp"

#include <mutex>
#include <utility>
#include <vector>

#include "core/ignored_failure.hpp"

namespace syncmem::detail {
namespace {

struct registry {
  std::mutex mutex;
  std::vector<reclaimer> all;
};

registry& reclaimers() {
  static auto* const r = new registry{};  // never destroyed: allocations may run after main()
  return *r;
}

}  // namespace

void add_reclaimer(reclaimer r) {
  auto& reg = reclaimers();
  std::lock_guard lock{reg.mutex};
  reg.all.push_back(std::move(r));
  reclaimers_added.fetch_add(1, std::memory_order_acq_rel);
}

std::size_t run_reclaimers() noexcept {
  std::vector<reclaimer> all;
  {
    auto& reg = reclaimers();
    std::lock_guard lock{reg.mutex};
    ignore_failure("copying the reclaimers", [&] { all = reg.all; });
  }
  std::size_t let_go = 0;
  for (const auto& r : all) ignore_failure("running a reclaimer", [&] { let_go += r(); });
  return let_go;
}

}  // namespace syncmem::detail
