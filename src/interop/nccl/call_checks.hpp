#pragma once

// The argument checks of communicator's calls, each failing with a message
// that names the communicator, the call and the argument.

#include <cstddef>
#include <initializer_list>
#include <utility>
#include <vector>

#include "syncmem/device_buffer.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/dtype.hpp"
#include "syncmem/nccl/communicator.hpp"
#include "syncmem/shape.hpp"
#include "syncmem/stream.hpp"
#include "syncmem/tensor.hpp"

namespace syncmem::nccl::detail {

void check_stream(const communicator& c, const char* name, stream_view s);
void check_reduction(const communicator& c, const char* name, dtype type, reduce_op op);
void check_rank(const communicator& c, const char* name, const char* what, int r, bool may_be_self);
// count × size_of(type) × times, failing where it overflows.
[[nodiscard]] std::size_t checked_bytes(const communicator& c, const char* name, std::size_t count, dtype type,
                                        std::size_t times = 1);
// A raw pointer of `bytes`: device (or managed) memory of the rank's device,
// within its allocation.
void check_pointer(const communicator& c, const char* name, const char* arg, const void* p, std::size_t bytes);
// [a, a + an) and [b, b + bn) either coincide at `same_at` (b == a + same_at) or are disjoint.
void check_overlap(const communicator& c, const char* name, const void* a, std::size_t an, const void* b,
                   std::size_t bn, std::size_t same_at, const char* in_place);

// The number of `type` elements in a buffer of the communicator's device.
[[nodiscard]] std::size_t elements(const communicator& c, const char* name, const char* arg, const device_buffer& b,
                                   dtype type);
void check_tensor(const communicator& c, const char* name, const char* arg, const tensor& t);
void check_same_dtype(const communicator& c, const char* name, const tensor& send, const tensor& recv);
// The shapes of `size` stacked `part`s: (size × n, ...) and (size, n, ...).
[[nodiscard]] std::pair<shape, shape> stacked(const shape& part, int size);
void check_stacked(const communicator& c, const char* name, const char* whole_arg, const tensor& whole,
                   const char* part_arg, const tensor& part);
void check_tensor_overlap(const communicator& c, const char* name, const tensor& send, const tensor& recv,
                          std::size_t same_at, const char* in_place);

// Orders the device_buffers a call uses on `s` with their own streams, both
// ways; each stream once, however many of the buffers it holds.
class buffer_order {
 public:
  buffer_order(std::initializer_list<const device_buffer*> buffers, stream_view s, device_id device);
  buffer_order(const buffer_order&) = delete;
  buffer_order& operator=(const buffer_order&) = delete;
  ~buffer_order() = default;
  // After the call: the buffers' streams wait for it once it is on `s`
  // (at the end of the thread's nccl::group, if one is open).
  void done() const;

 private:
  stream_view s_;
  device_id device_;
  std::vector<stream_view> own_;
};

}  // namespace syncmem::nccl::detail
