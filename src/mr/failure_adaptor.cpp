#include "syncmem/mr/failure_adaptor.hpp"

#include <string>
#include <utility>

#include <fmt/format.h>

#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr {

failure_adaptor::predicate failure_adaptor::nth(std::uint64_t n) {
  return [n](std::uint64_t call, std::size_t, stream_view) { return call == n; };
}

failure_adaptor::predicate failure_adaptor::every_nth(std::uint64_t n) {
  SYNCMEM_EXPECTS(n > 0, "failure_adaptor::every_nth: n must be at least 1");
  return [n](std::uint64_t call, std::size_t, stream_view) { return call % n == 0; };
}

failure_adaptor::predicate failure_adaptor::larger_than(std::size_t bytes) {
  return [bytes](std::uint64_t, std::size_t asked, stream_view) { return asked > bytes; };
}

failure_adaptor::predicate failure_adaptor::always() {
  return [](std::uint64_t, std::size_t, stream_view) { return true; };
}

failure_adaptor::failure_adaptor(memory_resource& upstream, predicate should_fail) : adaptor_base{upstream} {
  set_predicate(std::move(should_fail));
}

void failure_adaptor::set_predicate(predicate should_fail) {
  auto next = should_fail ? std::make_shared<const predicate>(std::move(should_fail)) : nullptr;
  std::lock_guard lock{mutex_};
  should_fail_ = std::move(next);
}

void* failure_adaptor::do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  const auto call = calls_.fetch_add(1, std::memory_order_relaxed) + 1;
  std::shared_ptr<const predicate> should_fail;
  {
    std::lock_guard lock{mutex_};
    should_fail = should_fail_;
  }
  if (should_fail && (*should_fail)(call, bytes, stream)) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    oom_info info;
    info.requested = bytes;
    info.device = device();
    info.label = std::string{current_allocation_label()};
    info.resource = name();
    info.hint = fmt::format("failure injected by failure_adaptor (allocate call {})", call);
    SYNCMEM_OUT_OF_MEMORY(std::move(info));
  }
  return upstream().allocate(bytes, stream, alignment);
}

void failure_adaptor::do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept {
  upstream().deallocate(p, bytes, stream, alignment);
}

}  // namespace syncmem::mr
