#include <stdexcept>

#include "example_kernels.hpp"
#include "example_math.hpp"

namespace examples {

void transform(syncmem::stream_view s, const float* x, float* y, std::size_t n, float scale, float offset, int rounds) {
  if (s.device().kind() == syncmem::device_kind::cuda) return cuda::transform(s, x, y, n, scale, offset, rounds);
  s.launch_host_func([=] {
    for (std::size_t i = 0; i < n; ++i) y[i] = math::transform(x[i], scale, offset, rounds);
  });
}

float transform_one(float x, float scale, float offset, int rounds) {
  return math::transform(x, scale, offset, rounds);
}

void leaky_activate(syncmem::stream_view s, float* x, std::size_t n) {
  if (s.device().kind() == syncmem::device_kind::cuda) return cuda::leaky_activate(s, x, n);
  s.launch_host_func([=] {
    for (std::size_t i = 0; i < n; ++i) x[i] = math::leaky(x[i]);
  });
}

void relu_forward(syncmem::stream_view s, const float* bottom, float* top, std::size_t n, float slope) {
  if (s.device().kind() == syncmem::device_kind::cuda) return cuda::relu_forward(s, bottom, top, n, slope);
  s.launch_host_func([=] {
    for (std::size_t i = 0; i < n; ++i) top[i] = math::relu(bottom[i], slope);
  });
}

void relu_backward(syncmem::stream_view s, const float* top_diff, const float* bottom, float* bottom_diff,
                   std::size_t n, float slope) {
  if (s.device().kind() == syncmem::device_kind::cuda) {
    return cuda::relu_backward(s, top_diff, bottom, bottom_diff, n, slope);
  }
  s.launch_host_func([=] {
    for (std::size_t i = 0; i < n; ++i) bottom_diff[i] = math::relu_grad(top_diff[i], bottom[i], slope);
  });
}

}  // namespace examples
