// Without CUDA there are no CUDA devices, so these are never reached.

#include <stdexcept>

#include "example_kernels.hpp"

namespace examples::cuda {
namespace {
[[noreturn]] void no_cuda() { throw std::logic_error{"this build has no CUDA"}; }
}  // namespace
void transform(syncmem::stream_view, const float*, float*, std::size_t, float, float, int) { no_cuda(); }
void leaky_activate(syncmem::stream_view, float*, std::size_t) { no_cuda(); }
void relu_forward(syncmem::stream_view, const float*, float*, std::size_t, float) { no_cuda(); }
void relu_backward(syncmem::stream_view, const float*, const float*, float*, std::size_t, float) { no_cuda(); }
}  // namespace examples::cuda
