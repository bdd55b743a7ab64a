#include "syncmem/mr/statistics_adaptor.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace syncmem::mr {

namespace {
void add(usage_counter& c, std::int64_t n) {
  c.current += n;
  c.total += n;
  c.peak = std::max(c.peak, c.current);
}
}  // namespace

statistics_adaptor::statistics_adaptor(memory_resource& upstream) : adaptor_base{upstream} {}

resource_statistics statistics_adaptor::statistics() const {
  std::lock_guard lock{mutex_};
  return statistics_;
}

void statistics_adaptor::reset_peaks() {
  std::lock_guard lock{mutex_};
  statistics_.bytes.peak = statistics_.bytes.current;
  statistics_.allocations.peak = statistics_.allocations.current;
}

void* statistics_adaptor::do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  void* p = nullptr;
  try {
    p = upstream().allocate(bytes, stream, alignment);
  } catch (...) {
    std::lock_guard lock{mutex_};
    ++statistics_.failed_allocations;
    throw;
  }
  std::lock_guard lock{mutex_};
  add(statistics_.bytes, static_cast<std::int64_t>(bytes));
  add(statistics_.allocations, 1);
  return p;
}

void statistics_adaptor::do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept {
  upstream().deallocate(p, bytes, stream, alignment);
  std::lock_guard lock{mutex_};
  statistics_.bytes.current -= static_cast<std::int64_t>(bytes);
  statistics_.allocations.current -= 1;
  ++statistics_.deallocations;
}

}  // namespace syncmem::mr
