// A darknet-style program on compat/darknet.hpp: arrays made and filled with
// cuda_make_array / cuda_push_array, a leaky activation run on the device,
// results pulled back with cuda_pull_array and checked against the host.
// Ported from darknet by changing the include and the namespace.
//
// Runs on the first CUDA device, or on an emulated device when there is none
// (SYNCMEM_EMULATED_DEVICES=1).

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "common/example_kernels.hpp"
#include "syncmem/compat/darknet.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"

using namespace syncmem::compat::darknet;

namespace {

// darknet's layer: outputs on the host and on the device.
struct layer {
  int outputs = 0;
  int batch = 0;
  std::vector<float> output;
  float* output_gpu = nullptr;
};

layer make_layer(int batch, int outputs) {
  layer l;
  l.batch = batch;
  l.outputs = outputs;
  l.output.assign(static_cast<std::size_t>(batch * outputs), 0.0F);
  l.output_gpu = cuda_make_array(l.output.data(), l.output.size());
  return l;
}

void free_layer(layer& l) {
  cuda_free(l.output_gpu);
  l.output_gpu = nullptr;
}

// forward_activation_layer_gpu: copy the input in, activate in place.
void forward_activation_layer_gpu(layer& l, float* input_gpu) {
  std::vector<float> staging(static_cast<std::size_t>(l.batch * l.outputs));
  cuda_pull_array(input_gpu, staging.data(), staging.size());
  cuda_push_array(l.output_gpu, staging.data(), staging.size());
  examples::leaky_activate(get_cuda_stream(), l.output_gpu, staging.size());
}

}  // namespace

int main() try {
  if (syncmem::device_count() == 0) {
    std::fprintf(stderr, "darknet_style: no device; set SYNCMEM_EMULATED_DEVICES=1 to run without a GPU\n");
    return 2;
  }
  const int batch = 8;
  const int outputs = 4096;
  std::mt19937 random{std::random_device{}()};
  std::uniform_real_distribution<float> pick{-3.0F, 3.0F};
  std::vector<float> input(static_cast<std::size_t>(batch * outputs));
  for (auto& x : input) x = pick(random);

  float* input_gpu = cuda_make_array(input.data(), input.size());
  layer l = make_layer(batch, outputs);
  forward_activation_layer_gpu(l, input_gpu);
  // Push only the second image again, as darknet does for one image of a batch.
  for (int i = 0; i < outputs; ++i) input[static_cast<std::size_t>(outputs + i)] *= -1.0F;
  cuda_push_array(input_gpu + outputs, input.data() + outputs, static_cast<std::size_t>(outputs));
  forward_activation_layer_gpu(l, input_gpu);
  cuda_pull_array(l.output_gpu, l.output.data(), l.output.size());

  int wrong = 0;
  for (std::size_t i = 0; i < input.size(); ++i) {
    const float want = input[i] > 0 ? input[i] : 0.1F * input[i];
    if (std::fabs(l.output[i] - want) > 1e-6F) ++wrong;
  }
  free_layer(l);
  cuda_free(input_gpu);
  std::printf("darknet_style on %s: leaky activation of %d x %d outputs, %d wrong values\n",
              syncmem::to_string(syncmem::current_device()).c_str(), batch, outputs, wrong);
  return wrong == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "darknet_style: %s\n", e.what());
  return 1;
}
