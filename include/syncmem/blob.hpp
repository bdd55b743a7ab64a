#pragma once

/// @file blob.hpp
/// @brief Caffe's Blob on syncmem tensors: a data tensor and a diff (gradient)
/// tensor of one shape, with Caffe's operations under snake_case names.

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>

#include "syncmem/device_id.hpp"
#include "syncmem/dtype.hpp"
#include "syncmem/shape.hpp"
#include "syncmem/stream.hpp"
#include "syncmem/synced_memory.hpp"
#include "syncmem/tensor.hpp"

namespace syncmem {

/// @brief Caffe's `Blob<Dtype>`: a `data` tensor and a `diff` tensor of one
/// shape and dtype on one device, each in its own synced_memory (see
/// tensor.hpp for storage, states, streams and capacity).
///
/// Caffe's names map as follows (a Caffe-compatible header is built on this):
///
/// | Caffe `Blob<Dtype>`                  | syncmem::blob                                       |
/// |--------------------------------------|-----------------------------------------------------|
/// | `Reshape(shape)`, `Reshape(n,c,h,w)`  | `reshape(shape)`, `reshape(n, c, h, w)`             |
/// | `ReshapeLike(other)`                 | `reshape_like(other)`                               |
/// | `shape()`, `shape(i)`, `num_axes()`  | `shape()`, `shape(i)`, `num_axes()`                 |
/// | `shape_string()`                     | `shape_string()` ("2 3 4 5 (120)")                  |
/// | `count()`, `count(start[, end])`     | `count()`, `count(start[, end])`                    |
/// | `CanonicalAxisIndex(i)`              | `canonical_axis_index(i)`                           |
/// | `num()`, `channels()`, `height()`, `width()`, `LegacyShape(i)` | the same in snake_case     |
/// | `offset(n,c,h,w)`, `offset(indices)` | `offset(n, c, h, w)`, `offset(indices)`             |
/// | `cpu_data()`, `mutable_cpu_data()`   | `host_data<T>()`, `mutable_host_data<T>()`          |
/// | `gpu_data()`, `mutable_gpu_data()`   | `device_data<T>([s])`, `mutable_device_data<T>([s])` |
/// | `cpu_diff()` ... `mutable_gpu_diff()` | `host_diff<T>()` ... `mutable_device_diff<T>([s])`  |
/// | `data()`, `diff()`                   | `data()`, `diff()` (tensors, not SyncedMemory)      |
/// | `CopyFrom(src, copy_diff, reshape)`  | `copy_from(src, copy_diff, reshape)`                |
/// | `ShareData(other)`, `ShareDiff(other)` | `share_data(other)`, `share_diff(other)`          |
/// | `Update()`                           | `update([s])` (data -= diff)                        |
/// | `asum_data()`, `asum_diff()`, `sumsq_data()`, `sumsq_diff()` | the same, returning double  |
/// | `scale_data(f)`, `scale_diff(f)`     | `scale_data(f[, s])`, `scale_diff(f[, s])`          |
/// | `FromProto`, `ToProto`               | none (protobuf); save_npy / load_npy on data()      |
/// | `set_cpu_data(p)`                    | none; borrow through `data().storage()->borrow_host` |
///
/// Differences from Caffe, on purpose: sizes are `std::int64_t`; the dtype is
/// a value (`dtype()`), not a template parameter; bad arguments throw
/// syncmem::logic_error instead of aborting; capacity is always that of the
/// storage actually held, so ShareData/ShareDiff cannot leave a stale
/// capacity behind (Caffe bug #5439: after ShareData, Caffe's Reshape could
/// reuse the other blob's smaller memory and run past its end); reductions
/// return double and are accumulated in double.
///
/// Where the math runs. `update()`, `asum_*()`, `sumsq_*()` and `scale_*()`
/// without a stream follow Caffe: on the host when the tensor's host side is
/// newest (`at_host`), on the device when the device side is (`at_device` or
/// `synced`), in order on the device's default stream; an uninitialized
/// tensor reads as zeros (reductions give 0, nothing is changed). With a
/// stream they run on the device in order on it. On CUDA devices they are CUDA
/// kernels; on emulated devices host functions run in stream order. Device
/// reductions are tree reductions in double; host ones are compensated sums
/// in double. They need dtype float32 or float64.
///
/// Moving. A blob is move-only (Caffe's is not copyable). A moved-from blob is
/// a blob without storage of the same dtype, exactly as `blob{dtype()}`: no
/// axes, count() and count(start, end) 0, capacity 0; its data() and diff()
/// are moved-from tensors (see tensor.hpp). The accessors give nullptr, the
/// reductions give 0 and update() and scale_*() change nothing, as for any
/// blob of count 0; device() throws syncmem::logic_error; sharing or copying
/// a blob of another count throws as it would for any blob. reshape(), or
/// copy_from with `reshape_to_fit`, gives it storage again on the current
/// device. The legacy accessors answer as Caffe's default Blob does: 1 for
/// each axis the blob lacks.
///
/// Thread safety: like tensor.
class blob {
 public:
  /// @brief No storage, no axes, count 0, dtype float32 (Caffe's `Blob()`).
  blob() noexcept = default;
  /// @brief No storage, no axes, count 0, of dtype `type`.
  explicit blob(syncmem::dtype type) noexcept : data_{type}, diff_{type} {}
  /// @brief A blob of dtype `type` and shape `s` on `device`, in tensor's
  /// argument order (dtype, shape, device, options). The data tensor's label
  /// is options.label, the diff's options.label + ".diff".
  /// @throws syncmem::logic_error for an invalid device or a size over synced_memory::max_size()
  blob(syncmem::dtype type, const syncmem::shape& s, device_id device, synced_memory_options options = {});
  /// @brief A blob of dtype `type` and shape `s` on the current device.
  blob(syncmem::dtype type, const syncmem::shape& s, synced_memory_options options = {});
  /// @brief blob(type, s, device, options), in the order of the first
  /// release; kept for existing callers, new code uses the one above.
  blob(const syncmem::shape& s, device_id device, syncmem::dtype type = syncmem::dtype::float32,
       synced_memory_options options = {});
  /// @brief blob(type, s, options) on the current device; kept for existing callers.
  explicit blob(const syncmem::shape& s, syncmem::dtype type = syncmem::dtype::float32,
                synced_memory_options options = {});
  /// @brief Caffe's `Blob(num, channels, height, width)` on the current device.
  blob(std::int64_t num, std::int64_t channels, std::int64_t height, std::int64_t width,
       syncmem::dtype type = syncmem::dtype::float32);

  blob(const blob&) = delete;
  blob& operator=(const blob&) = delete;
  blob(blob&&) noexcept = default;
  blob& operator=(blob&&) noexcept = default;
  ~blob() = default;

  // ---- shape -------------------------------------------------------------------------
  /// @brief Gives data and diff shape `s`, reusing their capacity (tensor::reshape
  /// with resize_mode::keep). A blob without storage gets it on the current device.
  /// @throws syncmem::logic_error for a bad shape; syncmem::out_of_memory. Nothing
  /// changes when it throws.
  void reshape(const syncmem::shape& s);
  /// @brief reshape({num, channels, height, width}).
  void reshape(std::int64_t num, std::int64_t channels, std::int64_t height, std::int64_t width);
  /// @brief reshape(other.shape()).
  void reshape_like(const blob& other) { reshape(other.shape()); }

  [[nodiscard]] const syncmem::shape& shape() const noexcept { return data_.shape(); }
  /// @brief The extent of `axis`; negative axes count from the end.
  /// @throws syncmem::logic_error for an axis out of range
  [[nodiscard]] std::int64_t shape(int axis) const { return data_.shape()[axis]; }
  /// @brief Caffe's "2 3 4 5 (120)".
  [[nodiscard]] std::string shape_string() const;
  [[nodiscard]] int num_axes() const noexcept { return data_.num_axes(); }
  /// @brief The number of elements (0 for a blob without storage).
  [[nodiscard]] std::int64_t count() const noexcept { return data_.count(); }
  /// @brief The product of the extents of axes [start, end); 0 for a blob without storage, like count().
  /// @throws syncmem::logic_error unless 0 <= start <= end <= num_axes()
  [[nodiscard]] std::int64_t count(int start, int end) const {
    const std::int64_t n = data_.shape().count(start, end);  // checks the range
    return data_.has_storage() ? n : 0;  // no axes without storage means no elements, not a scalar's one
  }
  /// @throws syncmem::logic_error unless 0 <= start <= num_axes()
  [[nodiscard]] std::int64_t count(int start) const { return count(start, num_axes()); }
  /// @brief Caffe's CanonicalAxisIndex: `axis` in 0..num_axes()-1.
  /// @throws syncmem::logic_error unless -num_axes() <= axis < num_axes()
  [[nodiscard]] int canonical_axis_index(int axis) const { return data_.shape().canonical_axis(axis); }
  /// @brief Caffe's LegacyShape: the extent of `axis` of a blob of at most 4
  /// axes, 1 for an axis it lacks.
  /// @throws syncmem::logic_error for a blob of more than 4 axes
  [[nodiscard]] std::int64_t legacy_shape(int axis) const;
  [[nodiscard]] std::int64_t num() const { return legacy_shape(0); }
  [[nodiscard]] std::int64_t channels() const { return legacy_shape(1); }
  [[nodiscard]] std::int64_t height() const { return legacy_shape(2); }
  [[nodiscard]] std::int64_t width() const { return legacy_shape(3); }
  /// @brief The element offset of (n, c, h, w) in a blob of at most 4 axes.
  /// As in Caffe each index may be 0..extent inclusive (extent gives the
  /// one-past-the-end offset).
  /// @throws syncmem::logic_error for an index out of that range
  [[nodiscard]] std::int64_t offset(std::int64_t n, std::int64_t c = 0, std::int64_t h = 0, std::int64_t w = 0) const;
  /// @brief The element offset of the first indices.size() axes' indices (the
  /// rest taken as 0).
  /// @throws syncmem::logic_error for more indices than axes, or an index out of 0..extent-1
  [[nodiscard]] std::int64_t offset(std::span<const std::int64_t> indices) const;
  /// @brief Elements the data tensor can hold without reallocating.
  [[nodiscard]] std::int64_t capacity() const noexcept { return data_.capacity(); }

  // ---- what it is and holds ------------------------------------------------------------
  [[nodiscard]] syncmem::dtype dtype() const noexcept { return data_.dtype(); }
  /// @throws syncmem::logic_error for a blob without storage
  [[nodiscard]] device_id device() const { return data_.device(); }
  [[nodiscard]] const tensor& data() const noexcept { return data_; }
  [[nodiscard]] const tensor& diff() const noexcept { return diff_; }

  // ---- access (Caffe's cpu_data / gpu_data ...) ------------------------------------------
  // Each checks T (and the stream) itself, so that an error names the blob and
  // the call made: they throw syncmem::logic_error unless T is the C++ type of
  // dtype(), or for a stream of another device than device().

  template <element_type T>
  [[nodiscard]] const T* host_data() const {
    check_type<T>("host_data");
    return data_.host_data<T>();
  }
  template <element_type T>
  [[nodiscard]] T* mutable_host_data() {
    check_type<T>("mutable_host_data");
    return data_.mutable_host_data<T>();
  }
  template <element_type T>
  [[nodiscard]] const T* device_data(stream_view s) const {
    check_type<T>("device_data");
    check_stream(s, "device_data");
    return data_.device_data<T>(s);
  }
  template <element_type T>
  [[nodiscard]] const T* device_data() const {
    check_type<T>("device_data");
    return data_.device_data<T>();
  }
  template <element_type T>
  [[nodiscard]] T* mutable_device_data(stream_view s) {
    check_type<T>("mutable_device_data");
    check_stream(s, "mutable_device_data");
    return data_.mutable_device_data<T>(s);
  }
  template <element_type T>
  [[nodiscard]] T* mutable_device_data() {
    check_type<T>("mutable_device_data");
    return data_.mutable_device_data<T>();
  }
  template <element_type T>
  [[nodiscard]] const T* host_diff() const {
    check_type<T>("host_diff");
    return diff_.host_data<T>();
  }
  template <element_type T>
  [[nodiscard]] T* mutable_host_diff() {
    check_type<T>("mutable_host_diff");
    return diff_.mutable_host_data<T>();
  }
  template <element_type T>
  [[nodiscard]] const T* device_diff(stream_view s) const {
    check_type<T>("device_diff");
    check_stream(s, "device_diff");
    return diff_.device_data<T>(s);
  }
  template <element_type T>
  [[nodiscard]] const T* device_diff() const {
    check_type<T>("device_diff");
    return diff_.device_data<T>();
  }
  template <element_type T>
  [[nodiscard]] T* mutable_device_diff(stream_view s) {
    check_type<T>("mutable_device_diff");
    check_stream(s, "mutable_device_diff");
    return diff_.mutable_device_data<T>(s);
  }
  template <element_type T>
  [[nodiscard]] T* mutable_device_diff() {
    check_type<T>("mutable_device_diff");
    return diff_.mutable_device_data<T>();
  }

  // ---- sharing and copying ---------------------------------------------------------------
  /// @brief Makes the data tensor a view of `other`'s data storage (Caffe's
  /// ShareData). This blob keeps its shape; its capacity becomes that of the
  /// shared storage. A later reshape past that capacity detaches the data
  /// again (see tensor::reshape); `other` is never affected by it.
  /// @throws syncmem::logic_error for another count, dtype or device
  void share_data(const blob& other);
  /// @brief The same for the diff tensor (Caffe's ShareDiff).
  void share_diff(const blob& other);
  /// @brief Copies `source`'s data (or, with `copy_diff`, its diff) into this
  /// blob's data (or diff), across devices too. With `reshape_to_fit` a blob of
  /// another shape is first reshaped like `source`.
  /// @throws syncmem::logic_error for another shape without `reshape_to_fit`, or another dtype
  void copy_from(const blob& source, bool copy_diff = false, bool reshape_to_fit = false);

  // ---- math (float32 and float64) ----------------------------------------------------------
  /// @brief data -= diff (Caffe's Update), where the data's newest side is.
  /// @throws syncmem::logic_error for a dtype other than float32 and float64
  void update();
  /// @brief data -= diff on the device, in order on `s`.
  void update(stream_view s);
  /// @brief Sum of |data| (0 for an uninitialized blob).
  [[nodiscard]] double asum_data() const;
  [[nodiscard]] double asum_data(stream_view s) const;
  /// @brief Sum of |diff|.
  [[nodiscard]] double asum_diff() const;
  [[nodiscard]] double asum_diff(stream_view s) const;
  /// @brief Sum of data².
  [[nodiscard]] double sumsq_data() const;
  [[nodiscard]] double sumsq_data(stream_view s) const;
  /// @brief Sum of diff².
  [[nodiscard]] double sumsq_diff() const;
  [[nodiscard]] double sumsq_diff(stream_view s) const;
  /// @brief data *= factor.
  void scale_data(double factor);
  void scale_data(double factor, stream_view s);
  /// @brief diff *= factor.
  void scale_diff(double factor);
  void scale_diff(double factor, stream_view s);

  // ---- data and diff together -------------------------------------------------------------
  /// @brief Starts bringing data and diff up to date on the device, on `s`,
  /// in one batch of copies (syncmem::prefetch_to_device over tensors).
  void prefetch_to_device(stream_view s) const;
  /// @brief The same towards the host.
  void prefetch_to_host(stream_view s) const;
  /// @brief Waits for the copies in flight of data and diff and for their streams.
  void synchronize() const;

  /// @brief "blob: data <tensor::to_string()>; diff <...>".
  [[nodiscard]] std::string to_string() const;

 private:
  void check_math(const char* operation) const;
  template <element_type T>
  void check_type(const char* accessor) const {
    if (dtype_of<T>() != dtype()) [[unlikely]]
      throw_type_mismatch(dtype_of<T>(), accessor);
  }
  [[noreturn]] void throw_type_mismatch(syncmem::dtype asked, const char* accessor) const;
  // Refuses a stream of another device than the blob's, naming the blob and the call.
  void check_stream(stream_view s, const char* accessor) const;
  [[nodiscard]] std::string describe() const;

  tensor data_;
  tensor diff_;
};

/// @brief Writes blob::to_string().
std::ostream& operator<<(std::ostream& os, const blob& b);

/// @brief Starts bringing the data and diff of every blob (a net's list of
/// blobs) up to date on the device, on `s`: all their copies in one batch.
/// Null entries are refused; shared storages count once.
/// @throws syncmem::logic_error for a null blob or a stream of another device (nothing is started)
void prefetch_to_device(std::span<const blob* const> blobs, stream_view s);
/// @brief The same towards the host.
void prefetch_to_host(std::span<const blob* const> blobs, stream_view s);
/// @brief Waits for every blob's copies and streams.
void synchronize(std::span<const blob* const> blobs);

}  // namespace syncmem
