#include "syncmem/mr/memory_resource.hpp"

#include <fmt/format.h>

#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "syncmem/error.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::mr {

// The messages of a bad request, out of line: formatting them in allocate()
// itself made every call save registers for them.
void memory_resource::reject(std::size_t alignment, stream_view stream) const {
  if (!valid_alignment(alignment)) {
    SYNCMEM_FAIL(
        fmt::format("{}: alignment {} must be a power of two no larger than {}", name(), alignment, max_alignment_));
  }
  SYNCMEM_FAIL(
      fmt::format("{}: a stream of {} was given for memory of {}; streams must belong to the "
                  "resource's device",
                  name(), to_string(stream.device()), to_string(*device_)));
}

void* memory_resource::allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  if (!valid_alignment(alignment) || (device_ && stream.device() != *device_)) [[unlikely]]
    reject(alignment, stream);
  if (bytes == 0) return nullptr;
  return do_allocate(bytes, stream, alignment);
}

void memory_resource::deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept {
  if (p == nullptr) return;
  if (device_ && stream.device() != *device_) [[unlikely]] {
    deallocate_after(p, bytes, stream, alignment);
    return;
  }
  do_deallocate(p, bytes, stream, alignment);
}

// A caller's bug; the memory is still returned, in the device's own order.
void memory_resource::deallocate_after(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept {
  try {
    detail::logger().error("{}: deallocate with a stream of {} for memory of {}; using {}'s default stream", name(),
                           to_string(stream.device()), to_string(*device_), to_string(*device_));
    stream.synchronize();
    do_deallocate(p, bytes, default_stream(*device_), alignment);
  } catch (...) {
    syncmem::detail::log_ignored("deallocating with a stream of another device",
                                 spdlog::level::warn);  // deallocate must not throw
  }
}

}  // namespace syncmem::mr
