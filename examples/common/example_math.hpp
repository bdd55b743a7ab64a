#pragma once

// The per-element math of the example kernels, shared by the CUDA kernels and
// their host twins so that both compute exactly the same function.

#if defined(__CUDACC__)
#define EXAMPLES_HD __host__ __device__
#else
#define EXAMPLES_HD
#endif

namespace examples::math {

EXAMPLES_HD inline float transform(float x, float scale, float offset, int rounds) {
  float y = x * scale + offset;
  for (int r = 0; r < rounds; ++r) y = y * 0.5f + 1.0f / (1.0f + y * y);
  return y;
}

EXAMPLES_HD inline float leaky(float x) { return x > 0 ? x : 0.1f * x; }

EXAMPLES_HD inline float relu(float x, float slope) { return x > 0 ? x : slope * x; }

EXAMPLES_HD inline float relu_grad(float top_diff, float bottom, float slope) {
  return top_diff * (bottom > 0 ? 1.0f : slope);
}

}  // namespace examples::math
