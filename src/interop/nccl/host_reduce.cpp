#include "host_reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "syncmem/error.hpp"

namespace syncmem::nccl::detail {
namespace {

// The arithmetic type of an element: 16-bit floats compute in float.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>, float, T>;

template <class T>
compute_t<T> load(const void* p, std::size_t i) {
  T v;
  std::memcpy(&v, static_cast<const std::byte*>(p) + i * sizeof(T), sizeof(T));
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    return static_cast<float>(v);
  } else {
    return v;
  }
}

template <class T>
void store(void* p, std::size_t i, compute_t<T> v) {
  T out{};
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    out = T{v};
  } else {
    out = v;
  }
  std::memcpy(static_cast<std::byte*>(p) + i * sizeof(T), &out, sizeof(T));
}

template <class T>
compute_t<T> apply(reduce_op op, compute_t<T> a, compute_t<T> b) {
  using C = compute_t<T>;
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;  // wraps, as NCCL's integer kernels do
    switch (op) {
      case reduce_op::sum:
      case reduce_op::avg:
        return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case reduce_op::prod:
        return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case reduce_op::min:
        return std::min(a, b);
      case reduce_op::max:
        return std::max(a, b);
    }
  } else {
    switch (op) {
      case reduce_op::sum:
      case reduce_op::avg:
        return a + b;
      case reduce_op::prod:
        return a * b;
      case reduce_op::min:
        return std::min(a, b);
      case reduce_op::max:
        return std::max(a, b);
    }
  }
  return a;
}

template <class T>
void reduce_typed(reduce_op op, void* acc, const void* in, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) store<T>(acc, i, apply<T>(op, load<T>(acc, i), load<T>(in, i)));
}

template <class T>
void divide_typed(void* acc, std::size_t count, int ranks) {
  for (std::size_t i = 0; i < count; ++i) {
    store<T>(acc, i, static_cast<compute_t<T>>(load<T>(acc, i) / static_cast<compute_t<T>>(ranks)));
  }
}

}  // namespace

void host_reduce(dtype type, reduce_op op, void* acc, const void* in, std::size_t count) {
  switch (type) {
    case dtype::int8:
      return reduce_typed<std::int8_t>(op, acc, in, count);
    case dtype::uint8:
      return reduce_typed<std::uint8_t>(op, acc, in, count);
    case dtype::int32:
      return reduce_typed<std::int32_t>(op, acc, in, count);
    case dtype::int64:
      return reduce_typed<std::int64_t>(op, acc, in, count);
    case dtype::float16:
      return reduce_typed<float16>(op, acc, in, count);
    case dtype::bfloat16:
      return reduce_typed<bfloat16>(op, acc, in, count);
    case dtype::float32:
      return reduce_typed<float>(op, acc, in, count);
    case dtype::float64:
      return reduce_typed<double>(op, acc, in, count);
    case dtype::bool_:
    case dtype::int16:
      break;
  }
  SYNCMEM_FAIL("nccl: no reduction for dtype " + syncmem::to_string(type));
}

void host_divide(dtype type, void* acc, std::size_t count, int ranks) {
  switch (type) {
    case dtype::float16:
      return divide_typed<float16>(acc, count, ranks);
    case dtype::bfloat16:
      return divide_typed<bfloat16>(acc, count, ranks);
    case dtype::float32:
      return divide_typed<float>(acc, count, ranks);
    case dtype::float64:
      return divide_typed<double>(acc, count, ranks);
    default:
      break;
  }
  SYNCMEM_FAIL("nccl: avg needs a floating-point dtype, not " + syncmem::to_string(type));
}

}  // namespace syncmem::nccl::detail
