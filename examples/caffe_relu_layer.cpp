// A Caffe-style layer on compat/caffe.hpp: ReLU (with a negative slope),
// forward and backward, written once for the CPU and once for the device the
// way Caffe layers are (Forward_cpu / Forward_gpu, Backward_cpu /
// Backward_gpu), and the two checked against each other on random data.
// Ported from Caffe by changing the include and the namespace.
//
// Runs on the first CUDA device, or on an emulated device when there is none
// (SYNCMEM_EMULATED_DEVICES=1).

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "common/example_kernels.hpp"
#include "syncmem/compat/caffe.hpp"
#include "syncmem/compat/device.hpp"
#include "syncmem/device.hpp"

using syncmem::compat::caffe::Blob;

namespace {

template <typename Dtype>
class ReLULayer {
 public:
  explicit ReLULayer(Dtype negative_slope) : negative_slope_{negative_slope} {}

  void Reshape(const std::vector<Blob<Dtype>*>& bottom, const std::vector<Blob<Dtype>*>& top) {
    top[0]->ReshapeLike(*bottom[0]);
  }

  void Forward_cpu(const std::vector<Blob<Dtype>*>& bottom, const std::vector<Blob<Dtype>*>& top) {
    const Dtype* bottom_data = bottom[0]->cpu_data();
    Dtype* top_data = top[0]->mutable_cpu_data();
    for (int i = 0; i < bottom[0]->count(); ++i) {
      top_data[i] = std::max(bottom_data[i], Dtype(0)) + negative_slope_ * std::min(bottom_data[i], Dtype(0));
    }
  }

  void Backward_cpu(const std::vector<Blob<Dtype>*>& top, const std::vector<Blob<Dtype>*>& bottom) {
    const Dtype* bottom_data = bottom[0]->cpu_data();
    const Dtype* top_diff = top[0]->cpu_diff();
    Dtype* bottom_diff = bottom[0]->mutable_cpu_diff();
    for (int i = 0; i < bottom[0]->count(); ++i) {
      bottom_diff[i] = top_diff[i] * ((bottom_data[i] > 0) + negative_slope_ * (bottom_data[i] <= 0));
    }
  }

  void Forward_gpu(const std::vector<Blob<Dtype>*>& bottom, const std::vector<Blob<Dtype>*>& top) {
    const Dtype* bottom_data = bottom[0]->gpu_data();
    Dtype* top_data = top[0]->mutable_gpu_data();
    examples::relu_forward(stream(), bottom_data, top_data, static_cast<std::size_t>(bottom[0]->count()),
                           negative_slope_);
  }

  void Backward_gpu(const std::vector<Blob<Dtype>*>& top, const std::vector<Blob<Dtype>*>& bottom) {
    const Dtype* bottom_data = bottom[0]->gpu_data();
    const Dtype* top_diff = top[0]->gpu_diff();
    Dtype* bottom_diff = bottom[0]->mutable_gpu_diff();
    examples::relu_backward(stream(), top_diff, bottom_data, bottom_diff, static_cast<std::size_t>(bottom[0]->count()),
                            negative_slope_);
  }

 private:
  // Caffe launches its kernels on the default stream; so do syncmem's blobs.
  static syncmem::stream_view stream() { return syncmem::default_stream(syncmem::compat::current()); }
  Dtype negative_slope_;
};

}  // namespace

int main() try {
  if (syncmem::device_count() == 0) {
    std::fprintf(stderr, "caffe_relu_layer: no device; set SYNCMEM_EMULATED_DEVICES=1 to run without a GPU\n");
    return 2;
  }
  std::mt19937 random{std::random_device{}()};
  std::normal_distribution<float> gaussian{0.0F, 1.0F};

  Blob<float> bottom(2, 3, 16, 16);
  Blob<float> top_cpu;
  Blob<float> top_gpu;
  for (int i = 0; i < bottom.count(); ++i) bottom.mutable_cpu_data()[i] = gaussian(random);
  ReLULayer<float> layer{0.01F};

  // Forward on both, then compare top data.
  layer.Reshape({&bottom}, {&top_cpu});
  layer.Reshape({&bottom}, {&top_gpu});
  layer.Forward_cpu({&bottom}, {&top_cpu});
  layer.Forward_gpu({&bottom}, {&top_gpu});
  int wrong = 0;
  for (int i = 0; i < bottom.count(); ++i) {
    if (std::fabs(top_cpu.cpu_data()[i] - top_gpu.cpu_data()[i]) > 1e-6F) ++wrong;
  }

  // Backward: the same top diff through both, compare bottom diffs.
  for (int i = 0; i < top_cpu.count(); ++i) {
    top_cpu.mutable_cpu_diff()[i] = top_gpu.mutable_cpu_diff()[i] = gaussian(random);
  }
  layer.Backward_cpu({&top_cpu}, {&bottom});
  const std::vector<float> cpu_diff(bottom.cpu_diff(), bottom.cpu_diff() + bottom.count());
  layer.Backward_gpu({&top_gpu}, {&bottom});
  for (int i = 0; i < bottom.count(); ++i) {
    if (std::fabs(cpu_diff[static_cast<std::size_t>(i)] - bottom.cpu_diff()[i]) > 1e-6F) ++wrong;
  }
  std::printf(
      "caffe_relu_layer on %s: forward and backward of %d values, CPU and device agree: %s "
      "(asum of top %.4f, of bottom diff %.4f)\n",
      syncmem::to_string(syncmem::compat::current()).c_str(), bottom.count(), wrong == 0 ? "yes" : "NO",
      static_cast<double>(top_gpu.asum_data()), static_cast<double>(bottom.asum_diff()));
  return wrong == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "caffe_relu_layer: %s\n", e.what());
  return 1;
}
