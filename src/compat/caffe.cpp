#include "syncmem/compat/caffe.hpp"

#include <climits>
#include <cstring>

#include <fmt/format.h>

#include "backend/handles.hpp"
#include "syncmem/compat/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::compat::caffe {

// ---------------------------------------------------------------------------
// SyncedMemory
// ---------------------------------------------------------------------------

SyncedMemory::SyncedMemory() : SyncedMemory{size_t{0}} {}

SyncedMemory::SyncedMemory(size_t size)
    : memory_{std::make_shared<synced_memory>(size, compat::current(), synced_memory_options{.label = "caffe"})} {}

SyncedMemory::SyncedMemory(std::shared_ptr<synced_memory> storage) noexcept : memory_{std::move(storage)} {}

SyncedMemory::~SyncedMemory() = default;

const void* SyncedMemory::cpu_data() { return memory_->host_data(); }
void* SyncedMemory::mutable_cpu_data() { return memory_->mutable_host_data(); }
const void* SyncedMemory::gpu_data() { return memory_->device_data(); }
void* SyncedMemory::mutable_gpu_data() { return memory_->mutable_device_data(); }

void SyncedMemory::set_cpu_data(void* data) {
  SYNCMEM_EXPECTS(data != nullptr, "SyncedMemory::set_cpu_data: data is null");
  memory_->borrow_host(data, memory_->size());
}

void SyncedMemory::set_gpu_data(void* data) {
  SYNCMEM_EXPECTS(data != nullptr, "SyncedMemory::set_gpu_data: data is null");
  memory_->borrow_device(data, memory_->size());
}

SyncedMemory::SyncedHead SyncedMemory::head() const {
  switch (memory_->state()) {
    case sync_state::uninitialized:
      return UNINITIALIZED;
    case sync_state::at_host:
      return HEAD_AT_CPU;
    case sync_state::at_device:
      return HEAD_AT_GPU;
    case sync_state::synced:
      return SYNCED;
  }
  return UNINITIALIZED;
}

size_t SyncedMemory::size() const { return memory_->size(); }

void SyncedMemory::async_gpu_push(stream_view stream) {
  SYNCMEM_EXPECTS(head() == HEAD_AT_CPU,
                  fmt::format("SyncedMemory::async_gpu_push: the head must be HEAD_AT_CPU (it is {})",
                              to_string(memory_->state())));
  memory_->prefetch_to_device(stream);
}

void SyncedMemory::async_gpu_push(CUstream_st* const& stream) {
  const auto device = memory_->device();
  SYNCMEM_EXPECTS(device.kind() == device_kind::cuda,
                  fmt::format("SyncedMemory::async_gpu_push: a cudaStream_t was given for memory of {}; pass a "
                              "syncmem::stream_view",
                              to_string(device)));
  async_gpu_push(detail::stream_access::make(device, detail::handle_of<stream_handle>(stream)));
}

// ---------------------------------------------------------------------------
// Blob
// ---------------------------------------------------------------------------

namespace {

syncmem::shape to_shape(const std::vector<int>& dims) {
  SYNCMEM_EXPECTS(static_cast<int>(dims.size()) <= syncmem::shape::max_axes,
                  fmt::format("Blob::Reshape: {} axes, at most {} are allowed", dims.size(), syncmem::shape::max_axes));
  std::vector<std::int64_t> extents(dims.begin(), dims.end());
  return syncmem::shape{extents};
}

int checked_int(std::int64_t value, const char* what) {
  SYNCMEM_EXPECTS(value <= INT_MAX, fmt::format("Blob: {} {} does not fit Caffe's int", what, value));
  return static_cast<int>(value);
}

}  // namespace

template <typename Dtype>
Blob<Dtype>::Blob() : blob_{dtype_of<Dtype>()} {}

template <typename Dtype>
Blob<Dtype>::Blob(const int num, const int channels, const int height, const int width) : blob_{dtype_of<Dtype>()} {
  Reshape(num, channels, height, width);
}

template <typename Dtype>
Blob<Dtype>::Blob(const std::vector<int>& shape) : blob_{dtype_of<Dtype>()} {
  Reshape(shape);
}

template <typename Dtype>
void Blob<Dtype>::Reshape(const int num, const int channels, const int height, const int width) {
  Reshape(std::vector<int>{num, channels, height, width});
}

template <typename Dtype>
void Blob<Dtype>::Reshape(const std::vector<int>& shape) {
  const auto s = to_shape(shape);
  const int count = checked_int(s.count(), "count");
  device_guard guard{blob_.data().has_storage() ? blob_.device() : compat::current()};
  blob_.reshape(s);
  shape_ = shape;
  count_ = count;
  sync_shape();
}

template <typename Dtype>
void Blob<Dtype>::ReshapeLike(const Blob& other) {
  Reshape(other.shape());
}

template <typename Dtype>
void Blob<Dtype>::sync_shape() {
  if (shape_data_) shape_data_.reset();  // rebuilt on the next gpu_shape()
}

template <typename Dtype>
std::string Blob<Dtype>::shape_string() const {
  return blob_.shape_string();
}

template <typename Dtype>
int Blob<Dtype>::shape(int index) const {
  return shape_[static_cast<std::size_t>(CanonicalAxisIndex(index))];
}

template <typename Dtype>
int Blob<Dtype>::count(int start_axis, int end_axis) const {
  return checked_int(blob_.count(start_axis, end_axis), "count");
}

template <typename Dtype>
int Blob<Dtype>::count(int start_axis) const {
  return checked_int(blob_.count(start_axis), "count");
}

template <typename Dtype>
int Blob<Dtype>::CanonicalAxisIndex(int axis_index) const {
  return blob_.canonical_axis_index(axis_index);
}

template <typename Dtype>
int Blob<Dtype>::LegacyShape(int index) const {
  return checked_int(blob_.legacy_shape(index), "extent");
}

template <typename Dtype>
int Blob<Dtype>::offset(const int n, const int c, const int h, const int w) const {
  return checked_int(blob_.offset(n, c, h, w), "offset");
}

template <typename Dtype>
int Blob<Dtype>::offset(const std::vector<int>& indices) const {
  std::vector<std::int64_t> wide(indices.begin(), indices.end());
  return checked_int(blob_.offset(wide), "offset");
}

template <typename Dtype>
void Blob<Dtype>::CopyFrom(const Blob<Dtype>& source, bool copy_diff, bool reshape) {
  if (source.count() != count_ || source.shape() != shape_) {
    SYNCMEM_EXPECTS(reshape, fmt::format("Blob::CopyFrom: trying to copy blobs of different sizes ({} from {}); "
                                         "pass reshape = true to take the source's shape",
                                         shape_string(), source.shape_string()));
    ReshapeLike(source);
  }
  blob_.copy_from(source.blob_, copy_diff, false);
}

template <typename Dtype>
Dtype Blob<Dtype>::data_at(const int n, const int c, const int h, const int w) const {
  return cpu_data()[offset(n, c, h, w)];
}

template <typename Dtype>
Dtype Blob<Dtype>::diff_at(const int n, const int c, const int h, const int w) const {
  return cpu_diff()[offset(n, c, h, w)];
}

template <typename Dtype>
Dtype Blob<Dtype>::data_at(const std::vector<int>& index) const {
  return cpu_data()[offset(index)];
}

template <typename Dtype>
Dtype Blob<Dtype>::diff_at(const std::vector<int>& index) const {
  return cpu_diff()[offset(index)];
}

template <typename Dtype>
std::shared_ptr<SyncedMemory> Blob<Dtype>::data() const {
  SYNCMEM_EXPECTS(blob_.data().has_storage(), "Blob::data: the blob has no data yet (Reshape it first)");
  return std::make_shared<SyncedMemory>(blob_.data().storage());
}

template <typename Dtype>
std::shared_ptr<SyncedMemory> Blob<Dtype>::diff() const {
  SYNCMEM_EXPECTS(blob_.diff().has_storage(), "Blob::diff: the blob has no diff yet (Reshape it first)");
  return std::make_shared<SyncedMemory>(blob_.diff().storage());
}

template <typename Dtype>
const Dtype* Blob<Dtype>::cpu_data() const {
  return blob_.host_data<Dtype>();
}

template <typename Dtype>
void Blob<Dtype>::set_cpu_data(Dtype* data) {
  SYNCMEM_EXPECTS(data != nullptr, "Blob::set_cpu_data: data is null");
  SYNCMEM_EXPECTS(blob_.data().has_storage(), "Blob::set_cpu_data: the blob has no data yet (Reshape it first)");
  blob_.data().storage()->borrow_host(data, static_cast<std::size_t>(count_) * sizeof(Dtype));
}

template <typename Dtype>
const int* Blob<Dtype>::gpu_shape() const {
  if (!shape_data_) {
    const auto device = blob_.data().has_storage() ? blob_.device() : compat::current();
    shape_data_ = std::make_unique<synced_memory>(std::max<std::size_t>(shape_.size(), 1) * sizeof(int), device,
                                                  synced_memory_options{.label = "caffe blob shape"});
    auto* host = static_cast<int*>(shape_data_->mutable_host_data());
    if (!shape_.empty()) std::memcpy(host, shape_.data(), shape_.size() * sizeof(int));
  }
  return static_cast<const int*>(shape_data_->device_data());
}

template <typename Dtype>
const Dtype* Blob<Dtype>::gpu_data() const {
  return blob_.device_data<Dtype>();
}

template <typename Dtype>
void Blob<Dtype>::set_gpu_data(Dtype* data) {
  SYNCMEM_EXPECTS(data != nullptr, "Blob::set_gpu_data: data is null");
  SYNCMEM_EXPECTS(blob_.data().has_storage(), "Blob::set_gpu_data: the blob has no data yet (Reshape it first)");
  blob_.data().storage()->borrow_device(data, static_cast<std::size_t>(count_) * sizeof(Dtype));
}

template <typename Dtype>
const Dtype* Blob<Dtype>::cpu_diff() const {
  return blob_.host_diff<Dtype>();
}

template <typename Dtype>
const Dtype* Blob<Dtype>::gpu_diff() const {
  return blob_.device_diff<Dtype>();
}

template <typename Dtype>
Dtype* Blob<Dtype>::mutable_cpu_data() {
  return blob_.mutable_host_data<Dtype>();
}

template <typename Dtype>
Dtype* Blob<Dtype>::mutable_gpu_data() {
  return blob_.mutable_device_data<Dtype>();
}

template <typename Dtype>
Dtype* Blob<Dtype>::mutable_cpu_diff() {
  return blob_.mutable_host_diff<Dtype>();
}

template <typename Dtype>
Dtype* Blob<Dtype>::mutable_gpu_diff() {
  return blob_.mutable_device_diff<Dtype>();
}

template <typename Dtype>
void Blob<Dtype>::Update() {
  blob_.update();
}

template <typename Dtype>
Dtype Blob<Dtype>::asum_data() const {
  return static_cast<Dtype>(blob_.asum_data());
}

template <typename Dtype>
Dtype Blob<Dtype>::asum_diff() const {
  return static_cast<Dtype>(blob_.asum_diff());
}

template <typename Dtype>
Dtype Blob<Dtype>::sumsq_data() const {
  return static_cast<Dtype>(blob_.sumsq_data());
}

template <typename Dtype>
Dtype Blob<Dtype>::sumsq_diff() const {
  return static_cast<Dtype>(blob_.sumsq_diff());
}

template <typename Dtype>
void Blob<Dtype>::scale_data(Dtype scale_factor) {
  blob_.scale_data(static_cast<double>(scale_factor));
}

template <typename Dtype>
void Blob<Dtype>::scale_diff(Dtype scale_factor) {
  blob_.scale_diff(static_cast<double>(scale_factor));
}

template <typename Dtype>
void Blob<Dtype>::ShareData(const Blob& other) {
  SYNCMEM_EXPECTS(count_ == other.count(),
                  fmt::format("Blob::ShareData: counts differ ({} and {})", count_, other.count()));
  blob_.share_data(other.blob_);
}

template <typename Dtype>
void Blob<Dtype>::ShareDiff(const Blob& other) {
  SYNCMEM_EXPECTS(count_ == other.count(),
                  fmt::format("Blob::ShareDiff: counts differ ({} and {})", count_, other.count()));
  blob_.share_diff(other.blob_);
}

template class Blob<float>;
template class Blob<double>;

}  // namespace syncmem::compat::caffe
