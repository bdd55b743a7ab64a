#include "call_checks.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "comm_backend.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::nccl::detail {

void check_stream(const communicator& c, const char* name, stream_view s) {
  SYNCMEM_EXPECTS(s.device() == c.device(),
                  fmt::format("{}: {}: the stream belongs to {}, expected a stream of {}", c.to_string(), name,
                              to_string(s.device()), to_string(c.device())));
}

void check_reduction(const communicator& c, const char* name, dtype type, reduce_op op) {
  if (type == dtype::bool_ || type == dtype::int16) {
    SYNCMEM_FAIL(
        fmt::format("{}: {}: dtype {} has no reduction in NCCL (valid: int8, uint8, int32, int64, float16, "
                    "bfloat16, float32, float64)",
                    c.to_string(), name, to_string(type)));
  }
  SYNCMEM_EXPECTS(can_reduce(type, op),
                  fmt::format("{}: {}: op avg needs a floating-point dtype (float16, bfloat16, float32, float64), "
                              "not {}",
                              c.to_string(), name, to_string(type)));
}

void check_rank(const communicator& c, const char* name, const char* what, int r, bool may_be_self) {
  SYNCMEM_EXPECTS(r >= 0 && r < c.size(),
                  fmt::format("{}: {}: {} is {}: valid range is [0, {})", c.to_string(), name, what, r, c.size()));
  SYNCMEM_EXPECTS(may_be_self || r != c.rank(),
                  fmt::format("{}: {}: {} is {}, this rank itself: give another rank", c.to_string(), name, what, r));
}

std::size_t checked_bytes(const communicator& c, const char* name, std::size_t count, dtype type, std::size_t times) {
  const std::size_t limit = std::numeric_limits<std::size_t>::max() / size_of(type) / times;
  SYNCMEM_EXPECTS(count <= limit, fmt::format("{}: {}: count {} of {} overflows the size of memory", c.to_string(),
                                              name, count, to_string(type)));
  return count * size_of(type) * times;
}

void check_pointer(const communicator& c, const char* name, const char* arg, const void* p, std::size_t bytes) {
  if (bytes == 0) return;
  SYNCMEM_EXPECTS(p != nullptr, fmt::format("{}: {}: {} is null for {} bytes: give device memory of {}", c.to_string(),
                                            name, arg, bytes, to_string(c.device())));
  const auto a = get_pointer_attributes(p);
  const bool ok = (a.kind == memory_kind::device && a.device == c.device()) || a.kind == memory_kind::managed;
  SYNCMEM_EXPECTS(
      ok, fmt::format("{}: {}: {} ({}) is {} memory{}, expected device memory of {}", c.to_string(), name, arg, p,
                      to_string(a.kind), a.device ? " of " + to_string(*a.device) : "", to_string(c.device())));
  if (a.size != 0) {
    const auto* begin = static_cast<const std::byte*>(p);
    const auto* end = static_cast<const std::byte*>(a.base) + a.size;
    SYNCMEM_EXPECTS(begin + bytes <= end,
                    fmt::format("{}: {}: {} ({}) has {} bytes left in its allocation, the call needs {}", c.to_string(),
                                name, arg, p, end - begin, bytes));
  }
}

void check_overlap(const communicator& c, const char* name, const void* a, std::size_t an, const void* b,
                   std::size_t bn, std::size_t same_at, const char* in_place) {
  if (an == 0 || bn == 0) return;
  const auto* x = static_cast<const std::byte*>(a);
  const auto* y = static_cast<const std::byte*>(b);
  if (y == x + same_at) return;
  SYNCMEM_EXPECTS(x + an <= y || y + bn <= x,
                  fmt::format("{}: {}: send and recv overlap; in place means {}", c.to_string(), name, in_place));
}

buffer_order::buffer_order(std::initializer_list<const device_buffer*> buffers, stream_view s, device_id device)
    : s_{s}, device_{device} {
  for (const device_buffer* b : buffers) {
    const auto own = b->stream();
    if (!own || *own == s || std::find(own_.begin(), own_.end(), *own) != own_.end()) continue;
    own_.push_back(*own);
    event before{device};
    before.record(*own);
    s.wait(before);
  }
}

void buffer_order::done() const {
  if (own_.empty()) return;
  after_enqueued([device = device_, s = s_, own = own_] {
    event after{device};
    after.record(s);
    for (const stream_view o : own) o.wait(after);
  });
}

std::size_t elements(const communicator& c, const char* name, const char* arg, const device_buffer& b, dtype type) {
  if (b.size() > 0) {
    const auto* resource = b.memory_resource();
    SYNCMEM_EXPECTS(resource != nullptr && resource->device() == c.device(),
                    fmt::format("{}: {}: {} is {}, expected a buffer of {}", c.to_string(), name, arg, b.to_string(),
                                to_string(c.device())));
  }
  SYNCMEM_EXPECTS(b.size() % size_of(type) == 0,
                  fmt::format("{}: {}: {} has {} bytes, not a whole number of {} elements ({} bytes each)",
                              c.to_string(), name, arg, b.size(), to_string(type), size_of(type)));
  return b.size() / size_of(type);
}

void check_tensor(const communicator& c, const char* name, const char* arg, const tensor& t) {
  SYNCMEM_EXPECTS(t.has_storage(), fmt::format("{}: {}: {} has no storage", c.to_string(), name, arg));
  SYNCMEM_EXPECTS(t.device() == c.device(), fmt::format("{}: {}: {} is {}, expected a tensor on {}", c.to_string(),
                                                        name, arg, t.to_string(), to_string(c.device())));
}

void check_same_dtype(const communicator& c, const char* name, const tensor& send, const tensor& recv) {
  SYNCMEM_EXPECTS(send.dtype() == recv.dtype(),
                  fmt::format("{}: {}: recv is {}, expected {} (send's dtype)", c.to_string(), name,
                              to_string(recv.dtype()), to_string(send.dtype())));
}

std::pair<shape, shape> stacked(const shape& part, int size) {
  std::vector<std::int64_t> outer{size};
  const auto e = part.extents();
  outer.insert(outer.end(), e.begin(), e.end());
  shape merged{outer};
  if (part.num_axes() > 0) merged = part.with_extent(0, part[0] * size);
  return {merged, shape{outer}};
}

void check_stacked(const communicator& c, const char* name, const char* whole_arg, const tensor& whole,
                   const char* part_arg, const tensor& part) {
  const auto [merged, outer] = stacked(part.shape(), c.size());
  SYNCMEM_EXPECTS(whole.shape() == merged || whole.shape() == outer,
                  fmt::format("{}: {}: {} has shape {}, expected {} or {} ({} ranks of {}'s shape {})", c.to_string(),
                              name, whole_arg, whole.shape().to_string(), merged.to_string(), outer.to_string(),
                              c.size(), part_arg, part.shape().to_string()));
}

void check_tensor_overlap(const communicator& c, const char* name, const tensor& send, const tensor& recv,
                          std::size_t same_at, const char* in_place) {
  if (!send.shares_storage_with(recv)) return;
  const std::size_t a = send.storage_offset();
  const std::size_t b = recv.storage_offset();
  if (send.nbytes() == 0 || recv.nbytes() == 0 || b == a + same_at) return;
  SYNCMEM_EXPECTS(
      a + send.nbytes() <= b || b + recv.nbytes() <= a,
      fmt::format("{}: {}: send and recv overlap in one storage; in place means {}", c.to_string(), name, in_place));
}

}  // namespace syncmem::nccl::detail
