#include "syncmem/mr/limiting_adaptor.hpp"

#include <string>

#include <fmt/format.h>

#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr {

limiting_adaptor::limiting_adaptor(memory_resource& upstream, std::size_t limit_bytes)
    : memory_resource{upstream.kind(), upstream.device(), upstream.max_alignment()},
      upstream_{&upstream},
      limit_{limit_bytes} {}

std::string limiting_adaptor::name() const { return fmt::format("limiting_adaptor({})", upstream_->name()); }

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
      throw out_of_memory{std::move(info)};
    }
  } while (!allocated_.compare_exchange_weak(before, before + bytes, std::memory_order_relaxed));
  try {
    return upstream_->allocate(bytes, stream, alignment);
  } catch (...) {
    allocated_.fetch_sub(bytes, std::memory_order_relaxed);
    throw;
  }
}

void limiting_adaptor::do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept {
  upstream_->deallocate(p, bytes, stream, alignment);
  allocated_.fetch_sub(bytes, std::memory_order_relaxed);
}

bool limiting_adaptor::do_is_equal(const memory_resource& other) const noexcept {
  const auto* o = dynamic_cast<const limiting_adaptor*>(&other);
  return o != nullptr && o->upstream_->is_equal(*upstream_);
}

}  // namespace syncmem::mr
