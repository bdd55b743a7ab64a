#include "backend/host_math.hpp"

#include <cmath>
#include <cstring>

namespace syncmem::detail::host_math {

namespace {

template <class U>
void fill_as(void* p, std::size_t count, std::uint64_t bits) noexcept {
  const auto value = static_cast<U>(bits);
  auto* out = static_cast<U*>(p);
  for (std::size_t i = 0; i < count; ++i) out[i] = value;
}

template <class T>
void scale_as(T* x, std::size_t n, T alpha) noexcept {
  for (std::size_t i = 0; i < n; ++i) x[i] *= alpha;
}

template <class T>
void axpy_as(std::size_t n, T alpha, const T* x, T* y) noexcept {
  for (std::size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// Neumaier's variant of Kahan summation: also exact when a term is larger
// than the running sum.
template <class T>
double reduce_as(const T* x, std::size_t n, reduction r) noexcept {
  double sum = 0;
  double compensation = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    const double term = r == reduction::asum ? std::fabs(v) : v * v;
    const double t = sum + term;
    if (std::fabs(sum) >= std::fabs(term)) {
      compensation += (sum - t) + term;
    } else {
      compensation += (term - t) + sum;
    }
    sum = t;
  }
  if (!std::isfinite(sum)) return sum;  // an infinity or NaN term: the compensation is meaningless
  return sum + compensation;
}

}  // namespace

void fill(void* p, std::size_t count, std::size_t itemsize, std::uint64_t bits) noexcept {
  switch (itemsize) {
    case 1:
      std::memset(p, static_cast<int>(bits & 0xFFU), count);
      break;
    case 2:
      fill_as<std::uint16_t>(p, count, bits);
      break;
    case 4:
      fill_as<std::uint32_t>(p, count, bits);
      break;
    default:
      fill_as<std::uint64_t>(p, count, bits);
      break;
  }
}

void scale(dtype type, void* x, std::size_t n, double alpha) noexcept {
  if (type == dtype::float32) {
    scale_as(static_cast<float*>(x), n, static_cast<float>(alpha));
  } else {
    scale_as(static_cast<double*>(x), n, alpha);
  }
}

void axpy(dtype type, std::size_t n, double alpha, const void* x, void* y) noexcept {
  if (type == dtype::float32) {
    axpy_as(n, static_cast<float>(alpha), static_cast<const float*>(x), static_cast<float*>(y));
  } else {
    axpy_as(n, alpha, static_cast<const double*>(x), static_cast<double*>(y));
  }
}

double reduce(dtype type, reduction r, const void* x, std::size_t n) noexcept {
  if (type == dtype::float32) return reduce_as(static_cast<const float*>(x), n, r);
  return reduce_as(static_cast<const double*>(x), n, r);
}

void iota(dtype type, void* x, std::size_t n, std::int64_t start) noexcept {
  const auto run = [&]<class T>(T* out) {
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<std::int64_t>(i));
  };
  switch (type) {
    case dtype::int32:
      run(static_cast<std::int32_t*>(x));
      break;
    case dtype::int64:
      run(static_cast<std::int64_t*>(x));
      break;
    case dtype::float32:
      run(static_cast<float*>(x));
      break;
    default:
      run(static_cast<double*>(x));
      break;
  }
}

std::uint64_t checksum(const void* p, std::size_t bytes) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t sum = 0;
  const std::size_t words = bytes / 8;
  for (std::size_t k = 0; k < words; ++k) {
    std::uint64_t w = 0;
    for (int j = 7; j >= 0; --j) w = (w << 8) | b[k * 8 + static_cast<std::size_t>(j)];
    sum += checksum_term(w, k);
  }
  if (const std::size_t rest = bytes % 8; rest != 0) {
    std::uint64_t w = 0;
    for (std::size_t j = rest; j-- > 0;) w = (w << 8) | b[words * 8 + j];
    sum += checksum_term(w, words);
  }
  return sum;
}

}  // namespace syncmem::detail::host_math
