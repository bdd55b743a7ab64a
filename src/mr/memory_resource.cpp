#include "syncmem/mr/memory_resource.hpp"

#include <bit>

#include <fmt/format.h>

#include "core/log.hpp"
#include "syncmem/error.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::mr {

void* memory_resource::allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  SYNCMEM_EXPECTS(
      std::has_single_bit(alignment) && alignment <= max_alignment_,
      fmt::format("{}: alignment {} must be a power of two no larger than {}", name(), alignment, max_alignment_));
  SYNCMEM_EXPECTS(!device_ || stream.device() == *device_,
                  fmt::format("{}: a stream of {} was given for memory of {}; streams must belong to the "
                              "resource's device",
                              name(), to_string(stream.device()), to_string(*device_)));
  if (bytes == 0) return nullptr;
  return do_allocate(bytes, stream, alignment);
}

void memory_resource::deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept {
  if (p == nullptr) return;
  if (device_ && stream.device() != *device_) [[unlikely]] {
    // A caller's bug; the memory is still returned, in the device's own order.
    try {
      detail::logger().error("{}: deallocate with a stream of {} for memory of {}; using {}'s default stream", name(),
                             to_string(stream.device()), to_string(*device_), to_string(*device_));
      stream.synchronize();
      do_deallocate(p, bytes, default_stream(*device_), alignment);
    } catch (...) {  // NOLINT(bugprone-empty-catch): deallocate must not throw
    }
    return;
  }
  do_deallocate(p, bytes, stream, alignment);
}

}  // namespace syncmem::mr
