#include "backend/vmm_capability.hpp"

#include <cstddef>

namespace syncmem::detail {

void vmm_capability::map_pages(int index, void* p, std::size_t page, const physical_handle* handles,
                               std::size_t count) {
  auto* const at = static_cast<std::byte*>(p);
  std::size_t mapped = 0;
  try {
    for (; mapped < count; ++mapped) map(index, at + mapped * page, page, handles[mapped]);
  } catch (...) {
    for (std::size_t i = 0; i < mapped; ++i) unmap(index, at + i * page, page);
    throw;
  }
}

}  // namespace syncmem::detail
