#pragma once

// The device work the examples do, on either kind of device: a CUDA kernel on
// a CUDA device, the same computation as a host function in stream order on
// an emulated one (examples/common/example_kernels.cu and
// example_kernels_host.cpp). Both take device pointers and run on `s`.

#include <cstddef>

#include "syncmem/stream.hpp"

namespace examples {

// y[i] = x[i] * scale + offset, then `rounds` rounds of a cheap nonlinearity,
// so that a batch can be made to take about as long as its copies.
void transform(syncmem::stream_view s, const float* x, float* y, std::size_t n, float scale, float offset, int rounds);
// The same computation on the host, for checking.
float transform_one(float x, float scale, float offset, int rounds);

// darknet's leaky activation: x > 0 ? x : 0.1 * x, in place.
void leaky_activate(syncmem::stream_view s, float* x, std::size_t n);

// Caffe's ReLU, forward (top = max(bottom, 0) + negative_slope * min(bottom, 0))
// and backward (bottom_diff = top_diff * (bottom > 0 ? 1 : negative_slope)).
void relu_forward(syncmem::stream_view s, const float* bottom, float* top, std::size_t n, float negative_slope);
void relu_backward(syncmem::stream_view s, const float* top_diff, const float* bottom, float* bottom_diff,
                   std::size_t n, float negative_slope);

// The CUDA halves (example_kernels.cu); absent without CUDA.
namespace cuda {
void transform(syncmem::stream_view s, const float* x, float* y, std::size_t n, float scale, float offset, int rounds);
void leaky_activate(syncmem::stream_view s, float* x, std::size_t n);
void relu_forward(syncmem::stream_view s, const float* bottom, float* top, std::size_t n, float negative_slope);
void relu_backward(syncmem::stream_view s, const float* top_diff, const float* bottom, float* bottom_diff,
                   std::size_t n, float negative_slope);
}  // namespace cuda

}  // namespace examples
