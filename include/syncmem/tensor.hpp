#pragma once

/// @file tensor.hpp
/// @brief An N-d array of one dtype, stored contiguously (row-major) in a
/// shared synced_memory: views, capacity-reusing reshape, typed access on the
/// host and the device, copies between devices.

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "syncmem/device_id.hpp"
#include "syncmem/dtype.hpp"
#include "syncmem/shape.hpp"
#include "syncmem/stream.hpp"
#include "syncmem/synced_memory.hpp"

namespace syncmem {

/// @brief A dtype, a shape, and the bytes `[storage_offset(), storage_offset()
/// + nbytes())` of a `std::shared_ptr<synced_memory>`: contiguous, row-major
/// (C order), with no padding between elements.
///
/// Storage. The bytes live in a synced_memory (see synced_memory.hpp): a host
/// side and a device side, each allocated on first use and synchronised
/// lazily, under streams. Everything synced_memory says about states, streams,
/// the device a buffer belongs to and its label holds for a tensor: the
/// tensor's accessors are the storage's, moved by `storage_offset()` bytes.
/// Several tensors may share one storage; they are then views of each other.
///
/// Copying a tensor is cheap and shares the storage (the copy is a view of the
/// whole); `clone()` makes a deep copy. A default-constructed tensor has no
/// storage, no axes and a count of 0 (like Caffe's default Blob); its first
/// `reshape()` gives it storage on the current device.
///
/// Moving. A moved-from tensor is a tensor without storage of the same dtype,
/// exactly as `tensor{dtype()}`: no axes, count 0, capacity 0, no label, state
/// uninitialized. Every call on it is defined: the accessors give nullptr and
/// empty spans, fill() and zero() write nothing, and what needs elements or a
/// device (at(), device(), view(), slice(), copying a tensor of another
/// shape) throws syncmem::logic_error naming it "without storage". reshape()
/// or assignment makes it usable again. (A tensor is a handle, like a
/// std::shared_ptr: what is moved is the handle, never the bytes.)
///
/// Const. `const` is about the handle, not the bytes, as for a
/// std::shared_ptr: a const tensor cannot be reshaped, re-pointed or written
/// through its mutable accessors, but its const accessors (host_data(),
/// device_data()) may copy between the host and device sides of the shared
/// storage and move its state to synced, since reading the newest bytes
/// needs that. synced_memory itself has no const accessors: it is the
/// storage, and each access may change its state.
///
/// Views. `view(shape)` (the same elements under another shape of the same
/// count) and `slice(begin, end)` (a range along the first axis) return
/// tensors that share the storage. Writes through one are seen through every
/// other; the state (which side is newest) is the storage's, shared by all.
///
/// Reshape and capacity. `capacity()` counts the elements the tensor can hold
/// from its offset to the end of the storage's capacity. `reshape(shape)`:
/// - within capacity, reuses the storage and allocates nothing. A tensor that
///   has its storage alone (no other tensor or holder shares it) shrinks or
///   grows the storage's size to what it needs, so that host/device copies
///   move only the bytes in use; a shared storage is never shrunk (the other
///   views keep their bytes) and grows only past its current size.
/// - beyond capacity, reallocates (`reallocations()` counts it). A tensor that
///   has its storage alone grows it in place (synced_memory::resize). A tensor
///   whose storage is shared *detaches*: it gets a fresh storage of its own
///   (same device and options), and the other views keep the old storage and
///   its contents unchanged. This is also what makes Caffe's ShareData safe
///   (Caffe bug #5439): the capacity is always the storage's actual one, never
///   a stale number remembered from before the sharing.
/// - with resize_mode::keep (the default) the first min(old, new) elements
///   keep their values. Elements past the old count read as zeros when the
///   storage grows (synced_memory_options::zero_fill), and hold whatever the
///   shared storage holds there when a shared tensor grows within capacity.
///   With resize_mode::discard a tensor that has its storage alone drops the
///   contents (the storage becomes uninitialized).
///
/// Typed access. `host_data<T>()`, `mutable_host_data<T>()`,
/// `device_data<T>(s)`, `mutable_device_data<T>(s)` and the typed spans and
/// elements check that `T` is the C++ type of `dtype()` and throw
/// syncmem::logic_error otherwise, naming the tensor, the call made (e.g.
/// `host_span<int32>()`) and both types; the untyped forms return `void*`. A tensor of count 0 or without storage gives
/// nullptr.
///
/// Errors. Bad arguments (shapes, ranges, types) throw syncmem::logic_error
/// naming the argument, the value and the valid range, and leave the tensor
/// as it was; a failed reshape or copy changes nothing.
///
/// Thread safety: like synced_memory. Calls on one tensor, and on tensors
/// that share a storage, must not overlap; tensors with different storages
/// are independent.
class tensor {
 public:
  /// @brief No storage, no axes, count 0, dtype float32.
  tensor() noexcept = default;
  /// @brief No storage, no axes, count 0, of dtype `type`.
  explicit tensor(syncmem::dtype type) noexcept : dtype_{type} {}
  /// @brief A tensor of `s` on the current device; no memory until first use.
  /// @throws syncmem::logic_error when count × itemsize exceeds synced_memory::max_size()
  tensor(syncmem::dtype type, const syncmem::shape& s, synced_memory_options options = {});
  /// @brief A tensor of `s` on `device`; no memory until first use.
  /// @throws syncmem::logic_error for an invalid device or a size over synced_memory::max_size()
  tensor(syncmem::dtype type, const syncmem::shape& s, device_id device, synced_memory_options options = {});
  /// @brief A tensor over bytes [offset, offset + count × itemsize) of an existing storage.
  /// @throws syncmem::logic_error when `storage` is null or too small
  tensor(syncmem::dtype type, const syncmem::shape& s, std::shared_ptr<synced_memory> storage, std::size_t offset = 0);

  /// @brief A view of the same storage (cheap; see the class comment).
  tensor(const tensor&) = default;
  tensor& operator=(const tensor&) = default;
  /// @brief Takes the storage and shape; `other` is left as `tensor{other.dtype()}`.
  tensor(tensor&& other) noexcept;
  /// @brief Takes the storage and shape; `other` is left as `tensor{other.dtype()}`.
  tensor& operator=(tensor&& other) noexcept;
  ~tensor() = default;

  // ---- what it is ------------------------------------------------------------------
  [[nodiscard]] syncmem::dtype dtype() const noexcept { return dtype_; }
  [[nodiscard]] const syncmem::shape& shape() const noexcept { return shape_; }
  [[nodiscard]] int num_axes() const noexcept { return shape_.num_axes(); }
  /// @brief The number of elements (0 without storage).
  [[nodiscard]] std::int64_t count() const noexcept { return count_; }
  /// @brief The number of elements as a std::size_t, for loops and spans (PyTorch's numel()).
  [[nodiscard]] std::size_t numel() const noexcept { return static_cast<std::size_t>(count_); }
  [[nodiscard]] std::size_t itemsize() const noexcept { return size_of(dtype_); }
  [[nodiscard]] std::size_t nbytes() const noexcept { return static_cast<std::size_t>(count_) * itemsize(); }
  /// @brief Elements reshape() can reach without reallocating (see the class comment).
  [[nodiscard]] std::int64_t capacity() const noexcept;
  /// @brief How often reshape() had to allocate (storage growth or detaching).
  [[nodiscard]] std::uint64_t reallocations() const noexcept { return reallocations_; }
  [[nodiscard]] bool has_storage() const noexcept { return storage_ != nullptr; }
  [[nodiscard]] const std::shared_ptr<synced_memory>& storage() const noexcept { return storage_; }
  /// @brief Where the tensor's bytes start in its storage.
  [[nodiscard]] std::size_t storage_offset() const noexcept { return offset_; }
  /// @brief Whether both tensors use one storage.
  [[nodiscard]] bool shares_storage_with(const tensor& other) const noexcept {
    return storage_ != nullptr && storage_ == other.storage_;
  }
  /// @brief The device of the storage.
  /// @throws syncmem::logic_error for a tensor without storage
  [[nodiscard]] device_id device() const;
  /// @brief The storage's label ("" without storage).
  [[nodiscard]] const std::string& label() const noexcept;
  /// @brief The storage's state (uninitialized without storage).
  [[nodiscard]] sync_state state() const;

  // ---- access ------------------------------------------------------------------------
  /// @brief The elements on the host, up to date (synced_memory::host_data).
  [[nodiscard]] const void* host_data() const;
  /// @brief The elements on the host, up to date; the host side becomes the newest.
  [[nodiscard]] void* mutable_host_data();
  /// @brief The elements on the device, up to date in order on `s` (a stream of device()).
  [[nodiscard]] const void* device_data(stream_view s) const;
  /// @brief device_data(s) on the device's default stream.
  [[nodiscard]] const void* device_data() const;
  /// @brief As device_data(s), and the device side becomes the newest.
  [[nodiscard]] void* mutable_device_data(stream_view s);
  [[nodiscard]] void* mutable_device_data();

  // Each typed accessor checks T itself, so that an error names the call made
  // (`host_span<int32>()`, not the accessor it is built on).

  /// @throws syncmem::logic_error unless T is the C++ type of dtype()
  template <element_type T>
  [[nodiscard]] const T* host_data() const {
    check_type(dtype_of<T>(), "host_data");
    return static_cast<const T*>(host_data());
  }
  /// @throws syncmem::logic_error unless T is the C++ type of dtype()
  template <element_type T>
  [[nodiscard]] T* mutable_host_data() {
    check_type(dtype_of<T>(), "mutable_host_data");
    return static_cast<T*>(mutable_host_data());
  }
  /// @throws syncmem::logic_error unless T is the C++ type of dtype(), or for a stream of another device
  template <element_type T>
  [[nodiscard]] const T* device_data(stream_view s) const {
    check_type(dtype_of<T>(), "device_data");
    return static_cast<const T*>(device_bytes(&s, "device_data"));
  }
  template <element_type T>
  [[nodiscard]] const T* device_data() const {
    check_type(dtype_of<T>(), "device_data");
    return static_cast<const T*>(device_data());
  }
  /// @throws syncmem::logic_error unless T is the C++ type of dtype(), or for a stream of another device
  template <element_type T>
  [[nodiscard]] T* mutable_device_data(stream_view s) {
    check_type(dtype_of<T>(), "mutable_device_data");
    return static_cast<T*>(mutable_device_bytes(&s, "mutable_device_data"));
  }
  template <element_type T>
  [[nodiscard]] T* mutable_device_data() {
    check_type(dtype_of<T>(), "mutable_device_data");
    return static_cast<T*>(mutable_device_data());
  }

  // ---- typed spans and elements ---------------------------------------------------
  // std::span views over the typed accessors, numel() elements long (empty
  // for a tensor of count 0 or without storage); the same checks and syncing.
  // A mutable span may be written until the next call on the tensor or a view.

  /// @brief The elements on the host, up to date.
  /// @throws syncmem::logic_error unless T is the C++ type of dtype()
  template <element_type T>
  [[nodiscard]] std::span<const T> host_span() const {
    check_type(dtype_of<T>(), "host_span");
    return {static_cast<const T*>(host_data()), numel()};
  }
  /// @brief The elements on the host, up to date; the host side becomes the newest.
  /// @throws syncmem::logic_error unless T is the C++ type of dtype()
  template <element_type T>
  [[nodiscard]] std::span<T> mutable_host_span() {
    check_type(dtype_of<T>(), "mutable_host_span");
    return {static_cast<T*>(mutable_host_data()), numel()};
  }
  /// @brief The elements on the device, up to date in order on `s`: for
  /// kernels and device copies, not to be read on the host.
  /// @throws syncmem::logic_error unless T is the C++ type of dtype(), or for a stream of another device
  template <element_type T>
  [[nodiscard]] std::span<const T> device_span(stream_view s) const {
    check_type(dtype_of<T>(), "device_span");
    return {static_cast<const T*>(device_bytes(&s, "device_span")), numel()};
  }
  /// @brief device_span<T>(s) on the device's default stream.
  template <element_type T>
  [[nodiscard]] std::span<const T> device_span() const {
    check_type(dtype_of<T>(), "device_span");
    return {static_cast<const T*>(device_data()), numel()};
  }
  /// @brief As device_span<T>(s), and the device side becomes the newest.
  /// @throws syncmem::logic_error unless T is the C++ type of dtype(), or for a stream of another device
  template <element_type T>
  [[nodiscard]] std::span<T> mutable_device_span(stream_view s) {
    check_type(dtype_of<T>(), "mutable_device_span");
    return {static_cast<T*>(mutable_device_bytes(&s, "mutable_device_span")), numel()};
  }
  /// @brief mutable_device_span<T>(s) on the device's default stream.
  template <element_type T>
  [[nodiscard]] std::span<T> mutable_device_span() {
    check_type(dtype_of<T>(), "mutable_device_span");
    return {static_cast<T*>(mutable_device_data()), numel()};
  }

  /// @brief The element at `index` (one index per axis, row-major), read on the
  /// host, e.g. `t.at<float>({i, j})` (Kokkos' `h_view(i, j)`).
  /// @throws syncmem::logic_error unless T is the C++ type of dtype(), for
  /// another number of indices than num_axes(), an index out of its extent, or
  /// a tensor without storage
  template <element_type T>
  [[nodiscard]] T at(std::initializer_list<std::int64_t> index) const {
    check_type(dtype_of<T>(), "at");
    const std::size_t i = element_index(index, "at");
    return static_cast<const T*>(host_data())[i];
  }
  /// @brief The element at `index` on the host, to write: the host side becomes
  /// the newest; the reference may be written until the next call on the tensor.
  /// @throws syncmem::logic_error as at()
  template <element_type T>
  [[nodiscard]] T& mutable_at(std::initializer_list<std::int64_t> index) {
    check_type(dtype_of<T>(), "mutable_at");
    const std::size_t i = element_index(index, "mutable_at");
    return static_cast<T*>(mutable_host_data())[i];
  }

  /// @brief Starts bringing the storage's device side up to date on `s` (synced_memory::prefetch_to_device).
  void prefetch_to_device(stream_view s) const;
  /// @brief Starts bringing the storage's host side up to date (synced_memory::prefetch_to_host).
  void prefetch_to_host() const;
  /// @brief Waits for the storage's copies in flight and its last stream (synced_memory::synchronize).
  void synchronize() const;

  // ---- views -------------------------------------------------------------------------
  /// @brief The same elements under shape `s`, sharing the storage.
  /// @throws syncmem::logic_error unless s.count() == count(), or without storage
  [[nodiscard]] tensor view(const syncmem::shape& s) const;
  /// @brief Rows [begin, end) along the first axis, sharing the storage.
  /// @throws syncmem::logic_error for a tensor without axes, or unless
  /// 0 <= begin <= end <= shape()[0]
  [[nodiscard]] tensor slice(std::int64_t begin, std::int64_t end) const;
  /// @brief A deep copy with its own storage on the same device, with the same
  /// options and label. Its capacity is its count.
  [[nodiscard]] tensor clone() const;
  /// @brief A deep copy on `device` (any device, of any kind).
  [[nodiscard]] tensor clone(device_id device) const;

  // ---- shape ---------------------------------------------------------------------------
  /// @brief Gives the tensor shape `s`, reusing capacity (see the class comment).
  /// @throws syncmem::logic_error when count × itemsize exceeds synced_memory::max_size(),
  /// or when growing borrowed memory that may not grow; syncmem::out_of_memory.
  /// Nothing changes when it throws.
  void reshape(const syncmem::shape& s, resize_mode mode = resize_mode::keep);

  // ---- contents ------------------------------------------------------------------------
  /// @brief Copies the elements of `source` (same dtype and shape; any device).
  /// The copy goes from the source's newest side to this tensor's newest side
  /// (a synced source gives the side that saves a transfer); device-side work
  /// is ordered on this device's default stream. A copy between two device
  /// sides of one device is ordered on that stream after both tensors' earlier
  /// device work (it need not block the host); a copy that involves a host side
  /// or two devices has completed when copy_from returns.
  /// @throws syncmem::logic_error for another dtype or shape, or for
  /// overlapping ranges of one storage
  void copy_from(const tensor& source);
  /// @brief As copy_from(source), with device-side work ordered on `s` (a stream of device()).
  void copy_from(const tensor& source, stream_view s);

  /// @brief Sets every element to `value` converted to dtype(), as PyTorch's
  /// `fill_` does (`t.fill(1)` on a float32 tensor fills 1.0f): on the host
  /// when the host side is newest (or nothing was written yet), else on the
  /// device in order on its default stream. Floating-point dtypes round to the
  /// nearest value and take infinities and NaN; integer dtypes take whole
  /// numbers in their range; bool takes 0 and 1 (and true and false).
  /// @throws syncmem::logic_error when `value` cannot be represented in
  /// dtype() (out of range, a fraction or NaN for an integer dtype), naming the
  /// tensor, the value and the dtype; nothing is written then
  template <class V>
  requires element_type<V> || std::is_arithmetic_v<V>
  void fill(V value) { fill_bits(bits_for(value), nullptr); }
  /// @brief As fill(value), on the device, in order on `s` (a stream of device()).
  /// @throws syncmem::logic_error as fill(value), or for a stream of another device
  template <class V>
  requires element_type<V> || std::is_arithmetic_v<V>
  void fill(V value, stream_view s) { fill_bits(bits_for(value), &s); }
  /// @brief Sets every byte to zero (on the side fill() would use).
  void zero();
  /// @brief Sets every byte to zero on the device, in order on `s`.
  void zero(stream_view s);

  /// @brief "tensor 'weights' float32 (64, 3, 7, 7) on cuda:0, at_device", with
  /// the storage range when the tensor is a view, and the capacity when larger.
  [[nodiscard]] std::string to_string() const;

 private:
  // A fill value before conversion to dtype(): exactly one member is meaningful.
  struct fill_value {
    enum class kind : std::uint8_t { signed_integer, unsigned_integer, floating } what;
    std::int64_t i = 0;
    std::uint64_t u = 0;
    double f = 0;
  };
  template <class V>
  [[nodiscard]] std::uint64_t bits_for(V value) const {
    using U = std::remove_cv_t<V>;
    if constexpr (element_type<U>) {
      if (dtype_of<U>() == dtype_) return to_bits(value);  // exactly the element type: no conversion
    }
    if constexpr (std::is_same_v<U, float16> || std::is_same_v<U, bfloat16>) {
      return converted_bits({fill_value::kind::floating, 0, 0, static_cast<double>(static_cast<float>(value))});
    } else if constexpr (std::is_floating_point_v<U>) {
      return converted_bits({fill_value::kind::floating, 0, 0, static_cast<double>(value)});
    } else if constexpr (std::is_signed_v<U>) {
      return converted_bits({fill_value::kind::signed_integer, static_cast<std::int64_t>(value), 0, 0});
    } else {
      return converted_bits({fill_value::kind::unsigned_integer, 0, static_cast<std::uint64_t>(value), 0});
    }
  }
  // The bits of `v` in dtype(); throws when it cannot be represented.
  [[nodiscard]] std::uint64_t converted_bits(fill_value v) const;
  // The row-major position of `index`, checked against the shape.
  [[nodiscard]] std::size_t element_index(std::initializer_list<std::int64_t> index, const char* accessor) const;
  // Refuses a stream of another device, naming the tensor.
  void check_stream(stream_view s, const char* accessor) const;
  // The stream accessors' work, with the name of the call the user made for errors.
  [[nodiscard]] const void* device_bytes(const stream_view* s, const char* accessor) const;
  [[nodiscard]] void* mutable_device_bytes(const stream_view* s, const char* accessor);
  template <class T>
  static std::uint64_t to_bits(T value) noexcept {
    if constexpr (sizeof(T) == 1) return std::bit_cast<std::uint8_t>(value);
    if constexpr (sizeof(T) == 2) return std::bit_cast<std::uint16_t>(value);
    if constexpr (sizeof(T) == 4) return std::bit_cast<std::uint32_t>(value);
    if constexpr (sizeof(T) == 8) return std::bit_cast<std::uint64_t>(value);
  }
  void check_type(syncmem::dtype asked, const char* accessor) const {
    if (asked != dtype_) [[unlikely]]
      throw_type_mismatch(asked, accessor);
  }
  [[noreturn]] void throw_type_mismatch(syncmem::dtype asked, const char* accessor) const;
  void fill_bits(std::uint64_t bits, const stream_view* s);
  void zero_bytes(const stream_view* s);
  void copy_impl(const tensor& source, const stream_view* s);
  [[nodiscard]] std::string describe() const;

  std::shared_ptr<synced_memory> storage_;
  syncmem::shape shape_;
  std::size_t offset_ = 0;
  std::int64_t count_ = 0;
  std::uint64_t reallocations_ = 0;
  syncmem::dtype dtype_ = syncmem::dtype::float32;
};

/// @brief tensor::to_string().
[[nodiscard]] inline std::string to_string(const tensor& t) { return t.to_string(); }
/// @brief Writes tensor::to_string().
std::ostream& operator<<(std::ostream& os, const tensor& t);

/// @brief Starts bringing the storage of every tensor up to date on the
/// device, on `s`, without blocking: the storages' copies in one batch
/// (syncmem::prefetch_to_device over synced_memory; views of one storage
/// count once). Tensors without storage are skipped.
/// @throws syncmem::logic_error for a stream of another device than a storage's (nothing is started)
void prefetch_to_device(std::span<const tensor> tensors, stream_view s);
/// @brief The same towards the host: the storages whose device side is newest, in one batch on `s`.
void prefetch_to_host(std::span<const tensor> tensors, stream_view s);
/// @brief Each storage's synchronize(), waiting once for each stream.
void synchronize(std::span<const tensor> tensors);

/// @brief Whether `a` and `b` have one shape and every pair of elements
/// satisfies |a - b| <= atol + rtol × |b| (numpy.allclose), compared as
/// doubles on the host (dtypes may differ; int64 beyond 2^53 loses precision).
/// NaNs are equal only with `equal_nan`. For tests.
[[nodiscard]] bool allclose(const tensor& a, const tensor& b, double rtol = 1e-5, double atol = 1e-8,
                            bool equal_nan = false);

}  // namespace syncmem
