#include "syncmem/mr/pageable_resource.hpp"

#include <new>
#include <string>

#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr {

pageable_resource::pageable_resource() noexcept
    : memory_resource{memory_kind::pageable_host, std::nullopt, std::size_t{1} << 20} {}

void* pageable_resource::do_allocate(std::size_t bytes, stream_view, std::size_t alignment) {
  void* p = ::operator new (bytes, std::align_val_t{alignment}, std::nothrow);
  if (p == nullptr) {
    oom_info info;
    info.requested = bytes;
    info.label = std::string{current_allocation_label()};
    info.resource = name();
    SYNCMEM_OUT_OF_MEMORY(std::move(info));
  }
  return p;
}

void pageable_resource::do_deallocate(void* p, std::size_t, stream_view, std::size_t alignment) noexcept {
  ::operator delete (p, std::align_val_t{alignment});
}

bool pageable_resource::do_is_equal(const memory_resource& other) const noexcept {
  return dynamic_cast<const pageable_resource*>(&other) != nullptr;
}

}  // namespace syncmem::mr
