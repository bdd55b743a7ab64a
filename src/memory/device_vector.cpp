#include "syncmem/device_vector.hpp"

#include <fmt/format.h>

#include "syncmem/error.hpp"

namespace syncmem::detail {

std::size_t vector_bytes(std::size_t count, std::size_t element_size, const char* function) {
  SYNCMEM_EXPECTS(
      count <= std::numeric_limits<std::size_t>::max() / element_size,
      fmt::format("device_vector::{}: {} elements of {} bytes overflow a 64-bit size", function, count, element_size));
  return count * element_size;
}

void throw_vector_index(const device_buffer& b, const char* function, std::size_t index, std::size_t size) {
  SYNCMEM_FAIL(fmt::format("device_vector ({}): {}({}) is out of range: the vector has {} elements", b.to_string(),
                           function, index, size));
}

void throw_vector_span(const device_buffer& b, const char* function, std::size_t given, std::size_t expected) {
  SYNCMEM_FAIL(fmt::format("device_vector ({}): {} was given {} elements; the vector has {}", b.to_string(), function,
                           given, expected));
}

void check_vector_stream(const device_buffer& b, const char* function, stream_view s) {
  const std::optional<stream_view> last = b.stream();
  if (!last) return;  // an empty vector is bound to no device yet
  SYNCMEM_EXPECTS(s.device() == last->device(),
                  fmt::format("device_vector ({}): {} was given a stream of {}; the vector's memory is in order on a "
                              "stream of {}, and streams must belong to that device",
                              b.to_string(), function, to_string(s.device()), to_string(last->device())));
}

}  // namespace syncmem::detail
