#include "syncmem/mr/limiting_adaptor.hpp"

#include <string>

#include <fmt/format.h>

#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr {

limiting_adaptor::limiting_adaptor(memory_resource& upstream, std::size_t limit_bytes)
    : adaptor_base{upstream}, limit_{limit_bytes} {}

void* limiting_adaptor::do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  std::size_t before = allocated_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ || before > limit_ - bytes) {
      oom_info info;
      info.requested = bytes;
      info.device = device();
      info.label = std::string{current_allocation_label()};
      info.resource = name();
      info.in_use = before;
      info.limit = limit_;
      info.hint = fmt::format("the limit of {} would be passed: {} are allocated through it",
                              syncmem::detail::format_bytes(limit_), syncmem::detail::format_bytes(before));
      SYNCMEM_OUT_OF_MEMORY(std::move(info));
    }
  } while (!allocated_.compare_exchange_weak(before, before + bytes, std::memory_order_relaxed));
  try {
    return upstream().allocate(bytes, stream, alignment);
  } catch (...) {
    allocated_.fetch_sub(bytes, std::memory_order_relaxed);
    throw;
  }
}

void limiting_adaptor::do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept {
  upstream().deallocate(p, bytes, stream, alignment);
  allocated_.fetch_sub(bytes, std::memory_order_relaxed);
}

}  // namespace syncmem::mr
