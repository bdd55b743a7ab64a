#pragma once

/// @file dtype.hpp
/// @brief Element types of tensors: the `dtype` enumeration, its names and
/// sizes, the C++ type of each, and the two 16-bit floating-point value types
/// (`float16`, `bfloat16`) that C++20 lacks.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace syncmem {

/// @brief The element type of a tensor.
enum class dtype : std::uint8_t {
  bool_,     ///< bool, one byte holding 0 or 1
  int8,      ///< std::int8_t
  uint8,     ///< std::uint8_t
  int16,     ///< std::int16_t
  int32,     ///< std::int32_t
  int64,     ///< std::int64_t
  float16,   ///< syncmem::float16: IEEE 754 binary16
  bfloat16,  ///< syncmem::bfloat16: the upper half of a binary32
  float32,   ///< float (IEEE 754 binary32)
  float64,   ///< double (IEEE 754 binary64)
};

/// @brief Every dtype, in declaration order.
inline constexpr dtype all_dtypes[] = {dtype::bool_, dtype::int8,    dtype::uint8,    dtype::int16,   dtype::int32,
                                       dtype::int64, dtype::float16, dtype::bfloat16, dtype::float32, dtype::float64};

/// @brief "bool", "int8", "uint8", "int16", "int32", "int64", "float16",
/// "bfloat16", "float32", "float64" (numpy's names, and bfloat16's usual one).
[[nodiscard]] inline std::string to_string(dtype t) {
  switch (t) {
    case dtype::bool_:
      return "bool";
    case dtype::int8:
      return "int8";
    case dtype::uint8:
      return "uint8";
    case dtype::int16:
      return "int16";
    case dtype::int32:
      return "int32";
    case dtype::int64:
      return "int64";
    case dtype::float16:
      return "float16";
    case dtype::bfloat16:
      return "bfloat16";
    case dtype::float32:
      return "float32";
    case dtype::float64:
      return "float64";
  }
  return "unknown";
}

/// @brief Bytes per element.
[[nodiscard]] constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::bool_:
    case dtype::int8:
    case dtype::uint8:
      return 1;
    case dtype::int16:
    case dtype::float16:
    case dtype::bfloat16:
      return 2;
    case dtype::int32:
    case dtype::float32:
      return 4;
    case dtype::int64:
    case dtype::float64:
      return 8;
  }
  return 0;
}

/// @brief Whether `t` is a floating-point type (float16, bfloat16, float32, float64).
[[nodiscard]] constexpr bool is_floating_point(dtype t) noexcept {
  return t == dtype::float16 || t == dtype::bfloat16 || t == dtype::float32 || t == dtype::float64;
}

/// @brief IEEE 754 binary16 ("half"): 1 sign bit, 5 exponent bits, 10
/// mantissa bits. A plain value type with exact conversions to float and
/// round-to-nearest-even conversions from float (NaN stays NaN, overflow gives
/// infinity, tiny values become subnormal or zero). No arithmetic: convert to
/// float for that. Layout-compatible with CUDA's `__half`.
class float16 {
 public:
  constexpr float16() noexcept = default;
  /// @brief Rounds `value` to the nearest binary16, ties to even.
  constexpr explicit float16(float value) noexcept : bits_{from_float(value)} {}
  /// @brief The value, exactly.
  [[nodiscard]] constexpr explicit operator float() const noexcept { return to_float(bits_); }
  /// @brief The float16 with these bits.
  [[nodiscard]] static constexpr float16 from_bits(std::uint16_t bits) noexcept {
    float16 h;
    h.bits_ = bits;
    return h;
  }
  [[nodiscard]] constexpr std::uint16_t bits() const noexcept { return bits_; }
  /// @brief Bitwise equality (so +0 != -0 and a NaN equals itself).
  [[nodiscard]] static constexpr bool same_bits(float16 a, float16 b) noexcept { return a.bits_ == b.bits_; }

  /// @brief The conversions, on bit patterns.
  [[nodiscard]] static constexpr std::uint16_t from_float(float value) noexcept {
    const auto x = std::bit_cast<std::uint32_t>(value);
    const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000U);
    const std::uint32_t magnitude = x & 0x7FFF'FFFFU;
    if (magnitude >= 0x7F80'0000U) {  // infinity or NaN
      if (magnitude == 0x7F80'0000U) return sign | 0x7C00U;
      // NaN: keep the top of the payload and make it quiet, so it stays a NaN.
      return static_cast<std::uint16_t>(sign | 0x7E00U | ((magnitude >> 13) & 0x03FFU));
    }
    // 65520 (0x477FF000) lies halfway between the largest binary16, 65504, and
    // 65536; it and everything above round to infinity.
    if (magnitude >= 0x477F'F000U) return sign | 0x7C00U;
    if (magnitude < 0x3880'0000U) {  // below 2^-14: a subnormal result, in units of 2^-24
      const std::uint32_t exponent = magnitude >> 23;
      if (exponent < 102) return sign;  // below 2^-25: rounds to zero
      const std::uint32_t mantissa = (magnitude & 0x007F'FFFFU) | 0x0080'0000U;
      const std::uint32_t shift = 126 - exponent;  // 14..24
      std::uint32_t q = mantissa >> shift;
      const std::uint32_t rest = mantissa & ((1U << shift) - 1);
      const std::uint32_t half = 1U << (shift - 1);
      if (rest > half || (rest == half && (q & 1U) != 0)) ++q;  // may carry into the smallest normal
      return static_cast<std::uint16_t>(sign | q);
    }
    // A normal result: rebias the exponent, round the 13 dropped mantissa bits
    // (a carry into the exponent is the right answer, infinity included).
    std::uint32_t h = (((magnitude >> 23) - 112) << 10) | ((magnitude >> 13) & 0x03FFU);
    const std::uint32_t rest = magnitude & 0x1FFFU;
    if (rest > 0x1000U || (rest == 0x1000U && (h & 1U) != 0)) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }

  [[nodiscard]] static constexpr float to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1FU;
    std::uint32_t mantissa = h & 0x03FFU;
    if (exponent == 0x1FU) return std::bit_cast<float>(sign | 0x7F80'0000U | (mantissa << 13));
    if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal: normalise into a binary32 normal.
    std::uint32_t e = 113;
    while ((mantissa & 0x0400U) == 0) {
      mantissa <<= 1;
      --e;
    }
    return std::bit_cast<float>(sign | (e << 23) | ((mantissa & 0x03FFU) << 13));
  }

 private:
  std::uint16_t bits_ = 0;
};

/// @brief bfloat16: the upper 16 bits of a binary32 (1 sign, 8 exponent, 7
/// mantissa bits). Conversion from float rounds to nearest, ties to even; NaN
/// stays NaN (made quiet). Layout-compatible with CUDA's `__nv_bfloat16`.
class bfloat16 {
 public:
  constexpr bfloat16() noexcept = default;
  /// @brief Rounds `value` to the nearest bfloat16, ties to even.
  constexpr explicit bfloat16(float value) noexcept : bits_{from_float(value)} {}
  /// @brief The value, exactly.
  [[nodiscard]] constexpr explicit operator float() const noexcept { return to_float(bits_); }
  [[nodiscard]] static constexpr bfloat16 from_bits(std::uint16_t bits) noexcept {
    bfloat16 b;
    b.bits_ = bits;
    return b;
  }
  [[nodiscard]] constexpr std::uint16_t bits() const noexcept { return bits_; }
  [[nodiscard]] static constexpr bool same_bits(bfloat16 a, bfloat16 b) noexcept { return a.bits_ == b.bits_; }

  [[nodiscard]] static constexpr std::uint16_t from_float(float value) noexcept {
    const auto x = std::bit_cast<std::uint32_t>(value);
    if ((x & 0x7FFF'FFFFU) > 0x7F80'0000U) return static_cast<std::uint16_t>((x >> 16) | 0x0040U);  // quiet NaN
    // Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even;
    // a carry out of the mantissa steps the exponent (up to infinity).
    const std::uint32_t rounding = 0x7FFFU + ((x >> 16) & 1U);
    return static_cast<std::uint16_t>((x + rounding) >> 16);
  }

  [[nodiscard]] static constexpr float to_float(std::uint16_t b) noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
  }

 private:
  std::uint16_t bits_ = 0;
};

static_assert(sizeof(float16) == 2 && alignof(float16) == 2);
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2);
static_assert(std::is_trivially_copyable_v<float16> && std::is_trivially_copyable_v<bfloat16>);

namespace detail {

template <class T>
struct dtype_of_impl {
  static constexpr bool known = false;
};
template <>
struct dtype_of_impl<bool> {
  static constexpr bool known = true;
  static constexpr dtype value = dtype::bool_;
};
template <>
struct dtype_of_impl<float16> {
  static constexpr bool known = true;
  static constexpr dtype value = dtype::float16;
};
template <>
struct dtype_of_impl<bfloat16> {
  static constexpr bool known = true;
  static constexpr dtype value = dtype::bfloat16;
};
template <>
struct dtype_of_impl<float> {
  static constexpr bool known = true;
  static constexpr dtype value = dtype::float32;
};
template <>
struct dtype_of_impl<double> {
  static constexpr bool known = true;
  static constexpr dtype value = dtype::float64;
};

// Integers by size and signedness, so that int64_t and long long (distinct
// types of one size) both map to int64, and char to int8 or uint8.
template <class T>
constexpr dtype integer_dtype() noexcept {
  if constexpr (std::is_signed_v<T>) {
    if constexpr (sizeof(T) == 1) return dtype::int8;
    if constexpr (sizeof(T) == 2) return dtype::int16;
    if constexpr (sizeof(T) == 4) return dtype::int32;
    return dtype::int64;
  } else {
    return dtype::uint8;
  }
}

template <class T>
constexpr bool integer_has_dtype =
    std::is_integral_v<T> && !std::is_same_v<T, bool> &&
    (std::is_signed_v<T> ? (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8) : sizeof(T) == 1);

}  // namespace detail

/// @brief Whether `T` is the C++ type of a dtype: bool, the signed integers of
/// 1, 2, 4 and 8 bytes, unsigned integers of 1 byte, float16, bfloat16, float
/// and double (cv-qualifiers ignored).
template <class T>
concept element_type =
    detail::dtype_of_impl<std::remove_cv_t<T>>::known || detail::integer_has_dtype<std::remove_cv_t<T>>;

/// @brief The dtype of a C++ type, e.g. `dtype_of<float>() == dtype::float32`.
template <element_type T>
[[nodiscard]] constexpr dtype dtype_of() noexcept {
  using U = std::remove_cv_t<T>;
  if constexpr (detail::dtype_of_impl<U>::known) {
    return detail::dtype_of_impl<U>::value;
  } else {
    return detail::integer_dtype<U>();
  }
}

}  // namespace syncmem
