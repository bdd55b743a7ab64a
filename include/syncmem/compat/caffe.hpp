#pragma once

/// @file compat/caffe.hpp
/// @brief Caffe's `SyncedMemory` and `Blob<Dtype>` on syncmem.
///
/// Port by changing the include and the namespace (`syncmem::compat::caffe`).
/// They live on the current device of the compat kind (compat/device.hpp):
/// the current CUDA device, or an emulated device without a GPU.
///
/// Caffe's documented behaviour is kept: lazy allocation, the four heads,
/// `cpu_data`/`mutable_cpu_data`/`gpu_data`/`mutable_gpu_data` syncing the side
/// asked for, Reshape reallocating only when the count exceeds the capacity,
/// shapes and counts as `int`. The differences, each a fix or a consequence of
/// running on syncmem:
/// - `async_gpu_push` does not claim SYNCED before the copy is done: `head()`
///   stays HEAD_AT_CPU until it completes, and a write to the host side waits
///   for it (Caffe let the two race).
/// - Errors throw syncmem's exceptions (logic_error naming the argument,
///   out_of_memory with sizes) instead of CHECK-aborting the process.
/// - ShareData / ShareDiff keep the capacity right (Caffe bug #5439): a later
///   Reshape within the shared memory does not reallocate needlessly, and one
///   past it does.
/// - Host memory is pinned (from syncmem's caching pinned resource) in every
///   mode, not only in Caffe's GPU mode; device memory comes from the device's
///   caching allocator, not cudaMalloc.
/// - The API is the same in every build (Caffe's CPU_ONLY build removed members).
/// - `async_gpu_push` takes a syncmem::stream_view, or a cudaStream_t (which is
///   `CUstream_st*`: no CUDA header needed here) of the current CUDA device.
/// - `set_cpu_data` / `set_gpu_data` borrow the memory with its size (the
///   memory must hold size() bytes); the SyncedMemory never frees it.
/// - Not ported: FromProto / ToProto / ShapeEquals(BlobProto) (no protobuf; use
///   syncmem's .npy files) and Caffe's `Caffe::mode()` switch.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "syncmem/blob.hpp"
#include "syncmem/stream.hpp"
#include "syncmem/synced_memory.hpp"

namespace syncmem::compat::caffe {

/// @brief Caffe's SyncedMemory: a handle on a syncmem::synced_memory.
class SyncedMemory {
 public:
  SyncedMemory();
  explicit SyncedMemory(size_t size);
  /// @brief A handle on existing storage (what Blob::data() returns).
  explicit SyncedMemory(std::shared_ptr<synced_memory> storage) noexcept;
  ~SyncedMemory();
  SyncedMemory(const SyncedMemory&) = delete;
  SyncedMemory& operator=(const SyncedMemory&) = delete;

  const void* cpu_data();
  void set_cpu_data(void* data);
  const void* gpu_data();
  void set_gpu_data(void* data);
  void* mutable_cpu_data();
  void* mutable_gpu_data();
  enum SyncedHead { UNINITIALIZED, HEAD_AT_CPU, HEAD_AT_GPU, SYNCED };
  SyncedHead head() const;
  size_t size() const;
  /// @brief Starts the upload of the host side on `stream`. The head must be
  /// HEAD_AT_CPU (Caffe's CHECK); it becomes SYNCED once the copy is done.
  void async_gpu_push(stream_view stream);
  void async_gpu_push(CUstream_st* const& stream);

  /// @brief The syncmem buffer underneath.
  [[nodiscard]] synced_memory& memory() const { return *memory_; }

 private:
  std::shared_ptr<synced_memory> memory_;
};

/// @brief Caffe's Blob, for float and double.
template <typename Dtype>
class Blob {
 public:
  Blob();
  Blob(const int num, const int channels, const int height, const int width);
  explicit Blob(const std::vector<int>& shape);
  Blob(const Blob&) = delete;
  Blob& operator=(const Blob&) = delete;

  void Reshape(const int num, const int channels, const int height, const int width);
  void Reshape(const std::vector<int>& shape);
  void ReshapeLike(const Blob& other);
  std::string shape_string() const;
  const std::vector<int>& shape() const { return shape_; }
  int shape(int index) const;
  int num_axes() const { return static_cast<int>(shape_.size()); }
  int count() const { return count_; }
  int count(int start_axis, int end_axis) const;
  int count(int start_axis) const;
  int CanonicalAxisIndex(int axis_index) const;
  int num() const { return LegacyShape(0); }
  int channels() const { return LegacyShape(1); }
  int height() const { return LegacyShape(2); }
  int width() const { return LegacyShape(3); }
  int LegacyShape(int index) const;
  int offset(const int n, const int c = 0, const int h = 0, const int w = 0) const;
  int offset(const std::vector<int>& indices) const;
  /// @brief Copies data (or diff) from `source`; with `reshape`, takes its shape
  /// first, otherwise the shapes must match.
  void CopyFrom(const Blob<Dtype>& source, bool copy_diff = false, bool reshape = false);
  Dtype data_at(const int n, const int c, const int h, const int w) const;
  Dtype diff_at(const int n, const int c, const int h, const int w) const;
  Dtype data_at(const std::vector<int>& index) const;
  Dtype diff_at(const std::vector<int>& index) const;
  std::shared_ptr<SyncedMemory> data() const;
  std::shared_ptr<SyncedMemory> diff() const;

  const Dtype* cpu_data() const;
  void set_cpu_data(Dtype* data);
  const int* gpu_shape() const;
  const Dtype* gpu_data() const;
  void set_gpu_data(Dtype* data);
  const Dtype* cpu_diff() const;
  const Dtype* gpu_diff() const;
  Dtype* mutable_cpu_data();
  Dtype* mutable_gpu_data();
  Dtype* mutable_cpu_diff();
  Dtype* mutable_gpu_diff();
  void Update();
  Dtype asum_data() const;
  Dtype asum_diff() const;
  Dtype sumsq_data() const;
  Dtype sumsq_diff() const;
  void scale_data(Dtype scale_factor);
  void scale_diff(Dtype scale_factor);
  void ShareData(const Blob& other);
  void ShareDiff(const Blob& other);

  /// @brief The syncmem blob underneath.
  [[nodiscard]] syncmem::blob& blob() { return blob_; }
  [[nodiscard]] const syncmem::blob& blob() const { return blob_; }

 private:
  void sync_shape();

  syncmem::blob blob_;
  std::vector<int> shape_;
  int count_ = 0;
  mutable std::unique_ptr<synced_memory> shape_data_;  // the shape as ints, for gpu_shape()
};

extern template class Blob<float>;
extern template class Blob<double>;

}  // namespace syncmem::compat::caffe
