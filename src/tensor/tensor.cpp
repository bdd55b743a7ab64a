#include "syncmem/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "backend/host_math.hpp"
#include "backend/kernels.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"

namespace syncmem {

namespace {

// Bytes of `count` elements of `type`, checked against synced_memory::max_size().
std::size_t checked_bytes(dtype type, const shape& s) {
  const auto count = static_cast<std::uint64_t>(s.count());
  const std::size_t itemsize = size_of(type);
  SYNCMEM_EXPECTS(count <= synced_memory::max_size() / itemsize,
                  fmt::format("tensor of shape {} and dtype {}: {} elements of {} bytes exceed the largest buffer of "
                              "{} bytes",
                              s.to_string(), syncmem::to_string(type), count, itemsize, synced_memory::max_size()));
  return static_cast<std::size_t>(count) * itemsize;
}

// The options of a storage made like `like` (for a detached or cloned tensor).
synced_memory_options options_like(const synced_memory& like, device_id device) {
  synced_memory_options options = like.options();
  options.label = like.label();
  if (device != like.device()) options.device_resource = nullptr;  // that resource belongs to the old device
  return options;
}

const char* byte_at(const void* p, std::size_t offset) { return static_cast<const char*>(p) + offset; }
char* byte_at(void* p, std::size_t offset) { return static_cast<char*>(p) + offset; }

// Copies bytes [src_offset, +bytes) of `src` to [dst_offset, +bytes) of `dst`,
// from the source's newest side to the destination's (see tensor::copy_from).
// `given` is a stream of dst's device for device-side work, or null.
void copy_range(synced_memory& dst, std::size_t dst_offset, synced_memory& src, std::size_t src_offset,
                std::size_t bytes, const stream_view* given) {
  if (bytes == 0) return;
  const sync_state src_state = src.state();
  const sync_state dst_state = dst.state();
  const bool src_on_device =
      src_state == sync_state::at_device || (src_state == sync_state::synced && dst_state != sync_state::at_host);
  const bool dst_on_device = dst_state == sync_state::at_device ? true
                             : dst_state == sync_state::at_host ? false
                                                                : src_on_device;
  if (!src_on_device && !dst_on_device) {
    const void* sp = src.host_data();
    void* dp = dst.mutable_host_data();
    std::memcpy(byte_at(dp, dst_offset), byte_at(sp, src_offset), bytes);
    return;
  }
  const stream_view ds = given != nullptr ? *given : default_stream(dst.device());
  if (!src_on_device) {
    // The source's host memory is read asynchronously: wait before a later host write can race.
    const void* sp = src.host_data();
    void* dp = dst.mutable_device_data(ds);
    copy(byte_at(dp, dst_offset), byte_at(sp, src_offset), bytes, ds);
    return;
  }
  if (src.device() == dst.device()) {
    const void* sp = src.device_data(ds);
    if (!dst_on_device) {
      void* dp = dst.mutable_host_data();
      copy(byte_at(dp, dst_offset), byte_at(sp, src_offset), bytes, ds);  // the host side is complete on return
      return;
    }
    void* dp = dst.mutable_device_data(ds);
    // Ordered on ds for both buffers (ds is now the last stream of each).
    transfer pending = copy_async(byte_at(dp, dst_offset), byte_at(sp, src_offset), bytes, ds);
    return;
  }
  // Two devices. Streams cannot wait on another device's events, so the host
  // waits for the source to be complete, then for the copy.
  const stream_view ss = default_stream(src.device());
  const void* sp = src.device_data(ss);
  ss.synchronize();
  if (!dst_on_device) {
    void* dp = dst.mutable_host_data();
    copy(byte_at(dp, dst_offset), byte_at(sp, src_offset), bytes, ss);
    return;
  }
  void* dp = dst.mutable_device_data(ds);
  // A CUDA device's memory is only reachable from a CUDA stream. On the
  // source's stream the copy is not ordered after work pending on ds (the
  // destination's zero fill, a kernel writing it): wait for that first.
  const bool use_source_stream = syncmem::detail::backend_for(dst.device()).traits().device_memory_is_host_memory &&
                                 !syncmem::detail::backend_for(src.device()).traits().device_memory_is_host_memory;
  if (use_source_stream) ds.synchronize();
  copy(byte_at(dp, dst_offset), byte_at(sp, src_offset), bytes, use_source_stream ? ss : ds);
}

double element_as_double(dtype type, const void* p, std::size_t i) {
  switch (type) {
    case dtype::bool_:
      return static_cast<const std::uint8_t*>(p)[i] != 0 ? 1.0 : 0.0;
    case dtype::int8:
      return static_cast<const std::int8_t*>(p)[i];
    case dtype::uint8:
      return static_cast<const std::uint8_t*>(p)[i];
    case dtype::int16:
      return static_cast<const std::int16_t*>(p)[i];
    case dtype::int32:
      return static_cast<const std::int32_t*>(p)[i];
    case dtype::int64:
      return static_cast<double>(static_cast<const std::int64_t*>(p)[i]);
    case dtype::float16:
      return static_cast<float>(static_cast<const float16*>(p)[i]);
    case dtype::bfloat16:
      return static_cast<float>(static_cast<const bfloat16*>(p)[i]);
    case syncmem::dtype::float32:
      return static_cast<const float*>(p)[i];
    case syncmem::dtype::float64:
      return static_cast<const double*>(p)[i];
  }
  return 0;
}

}  // namespace

// ---------------------------------------------------------------------------
// construction
// ---------------------------------------------------------------------------

tensor::tensor(syncmem::dtype type, const syncmem::shape& s, synced_memory_options options)
    : tensor{type, s, current_device(), std::move(options)} {}

tensor::tensor(syncmem::dtype type, const syncmem::shape& s, device_id device, synced_memory_options options)
    : shape_{s}, count_{s.count()}, dtype_{type} {
  storage_ = std::make_shared<synced_memory>(checked_bytes(type, s), device, std::move(options));
}

tensor::tensor(syncmem::dtype type, const syncmem::shape& s, std::shared_ptr<synced_memory> storage, std::size_t offset)
    : shape_{s}, offset_{offset}, count_{s.count()}, dtype_{type} {
  SYNCMEM_EXPECTS(storage != nullptr, fmt::format("tensor of shape {} and dtype {}: the storage is null", s.to_string(),
                                                  syncmem::to_string(type)));
  const std::size_t bytes = checked_bytes(type, s);
  SYNCMEM_EXPECTS(offset % size_of(type) == 0,
                  fmt::format("tensor of dtype {}: storage offset {} is not a multiple of the element size {}",
                              syncmem::to_string(type), offset, size_of(type)));
  SYNCMEM_EXPECTS(
      bytes <= storage->size() && offset <= storage->size() - bytes,
      fmt::format("tensor of shape {} and dtype {}: bytes [{}, {}) do not fit in storage '{}' of {} bytes",
                  s.to_string(), syncmem::to_string(type), offset, offset + bytes, storage->label(), storage->size()));
  storage_ = std::move(storage);
}

tensor::tensor(tensor&& other) noexcept
    : storage_{std::move(other.storage_)},
      shape_{std::exchange(other.shape_, syncmem::shape{})},
      offset_{std::exchange(other.offset_, 0)},
      count_{std::exchange(other.count_, 0)},
      reallocations_{std::exchange(other.reallocations_, 0)},
      dtype_{other.dtype_} {}

tensor& tensor::operator=(tensor&& other) noexcept {
  if (this != &other) {
    storage_ = std::move(other.storage_);
    shape_ = std::exchange(other.shape_, syncmem::shape{});
    offset_ = std::exchange(other.offset_, 0);
    count_ = std::exchange(other.count_, 0);
    reallocations_ = std::exchange(other.reallocations_, 0);
    dtype_ = other.dtype_;
  }
  return *this;
}

// ---------------------------------------------------------------------------
// description
// ---------------------------------------------------------------------------

std::int64_t tensor::capacity() const noexcept {
  if (!storage_) return 0;
  const std::size_t capacity = storage_->capacity();
  return capacity <= offset_ ? 0 : static_cast<std::int64_t>((capacity - offset_) / itemsize());
}

device_id tensor::device() const {
  SYNCMEM_EXPECTS(storage_ != nullptr, "a tensor without storage has no device (reshape() gives it storage)");
  return storage_->device();
}

const std::string& tensor::label() const noexcept {
  static const std::string none;
  return storage_ ? storage_->label() : none;
}

sync_state tensor::state() const { return storage_ ? storage_->state() : sync_state::uninitialized; }

std::string tensor::describe() const {
  if (!storage_) return fmt::format("tensor {} {} without storage", syncmem::to_string(dtype_), shape_.to_string());
  const std::string& label = storage_->label();
  return fmt::format("tensor '{}' {} {} on {}", label.empty() ? std::string{"unlabelled"} : label,
                     syncmem::to_string(dtype_), shape_.to_string(), syncmem::to_string(storage_->device()));
}

std::string tensor::to_string() const {
  if (!storage_) return describe();
  std::string text = fmt::format("{}, {}", describe(), syncmem::to_string(storage_->state()));
  if (offset_ != 0 || nbytes() != storage_->size()) {
    text += fmt::format(", bytes [{}, {}) of a storage of {}", offset_, offset_ + nbytes(), storage_->size());
  }
  if (capacity() > count_) text += fmt::format(", capacity {}", capacity());
  return text;
}

std::ostream& operator<<(std::ostream& os, const tensor& t) { return os << t.to_string(); }

void tensor::throw_type_mismatch(syncmem::dtype asked, const char* accessor) const {
  SYNCMEM_FAIL(fmt::format("{}: {}<{}>() asks for {} elements, but the tensor's dtype is {}", describe(), accessor,
                           syncmem::to_string(asked), syncmem::to_string(asked), syncmem::to_string(dtype_)));
}

void tensor::check_stream(stream_view s, const char* accessor) const {
  SYNCMEM_EXPECTS(s.device() == storage_->device(),
                  fmt::format("{}: {} was given a stream of {}; streams must belong to {}", describe(), accessor,
                              syncmem::to_string(s.device()), syncmem::to_string(storage_->device())));
}

std::size_t tensor::element_index(std::initializer_list<std::int64_t> index, const char* accessor) const {
  // Without storage even a 0-axis index names no element (count is 0, not a scalar's 1).
  SYNCMEM_EXPECTS(storage_ != nullptr, fmt::format("{}: {}() has no element to give", describe(), accessor));
  SYNCMEM_EXPECTS(index.size() == static_cast<std::size_t>(num_axes()),
                  fmt::format("{}: {}() was given {} indices; the tensor has {} axes", describe(), accessor,
                              index.size(), num_axes()));
  std::size_t position = 0;
  int axis = 0;
  for (const std::int64_t i : index) {
    const std::int64_t extent = shape_[axis];
    SYNCMEM_EXPECTS(i >= 0 && i < extent, fmt::format("{}: {}(): index {} of axis {} is out of range [0, {})",
                                                      describe(), accessor, i, axis, extent));
    position = position * static_cast<std::size_t>(extent) + static_cast<std::size_t>(i);  // < count: no overflow
    ++axis;
  }
  return position;
}

namespace {

std::string fill_value_text(std::int64_t i, std::uint64_t u, double f, int what) {
  if (what == 0) return fmt::format("{}", i);
  if (what == 1) return fmt::format("{}", u);
  return fmt::format("{}", f);
}

}  // namespace

std::uint64_t tensor::converted_bits(fill_value v) const {
  using kind = fill_value::kind;
  const auto refuse = [&](std::string_view why) {
    SYNCMEM_FAIL(fmt::format("{}: fill({}) cannot be represented in {}: {}", describe(),
                             fill_value_text(v.i, v.u, v.f, static_cast<int>(v.what)), syncmem::to_string(dtype_),
                             why));
  };
  if (is_floating_point(dtype_)) {
    double d = 0;
    switch (v.what) {
      case kind::signed_integer:
        d = static_cast<double>(v.i);
        break;
      case kind::unsigned_integer:
        d = static_cast<double>(v.u);
        break;
      case kind::floating:
        d = v.f;
        break;
    }
    if (dtype_ == dtype::float64) return std::bit_cast<std::uint64_t>(d);
    // Past the largest finite value the conversion would overflow (PyTorch refuses it too).
    if (std::isfinite(d) && std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max())) {
      refuse("it overflows the dtype's range");
    }
    const auto f = static_cast<float>(d);
    if (dtype_ == dtype::float32) return std::bit_cast<std::uint32_t>(f);
    if (dtype_ == dtype::float16) {
      const float16 h{f};
      if (std::isfinite(d) && std::isinf(static_cast<float>(h))) refuse("it overflows the dtype's range (65504)");
      return to_bits(h);
    }
    const bfloat16 b{f};
    if (std::isfinite(d) && std::isinf(static_cast<float>(b))) refuse("it overflows the dtype's range");
    return to_bits(b);
  }
  // Integers and bool: whole numbers in range only.
  std::int64_t low = 0;
  std::uint64_t high = 1;
  const auto limits = [&]<class T>() {
    low = std::numeric_limits<T>::min();
    high = static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  };
  switch (dtype_) {
    case dtype::bool_:
      break;
    case dtype::int8:
      limits.operator()<std::int8_t>();
      break;
    case dtype::uint8:
      limits.operator()<std::uint8_t>();
      break;
    case dtype::int16:
      limits.operator()<std::int16_t>();
      break;
    case dtype::int32:
      limits.operator()<std::int32_t>();
      break;
    default:
      limits.operator()<std::int64_t>();
      break;
  }
  const auto range = [&] { return fmt::format("it lies outside [{}, {}]", low, high); };
  std::int64_t value = 0;
  switch (v.what) {
    case kind::signed_integer:
      if (v.i < low || (v.i >= 0 && static_cast<std::uint64_t>(v.i) > high)) refuse(range());
      value = v.i;
      break;
    case kind::unsigned_integer:
      if (v.u > high) refuse(range());
      value = static_cast<std::int64_t>(v.u);
      break;
    case kind::floating:
      if (std::isnan(v.f)) refuse("NaN has no integer value");
      if (v.f != std::trunc(v.f)) refuse("it is not a whole number");
      // 2^63 is exact as a double; every double below it and at or above -2^63 converts.
      if (!(v.f >= -9223372036854775808.0 && v.f < 9223372036854775808.0) || v.f < static_cast<double>(low) ||
          v.f > static_cast<double>(high)) {
        refuse(range());
      }
      value = static_cast<std::int64_t>(v.f);
      if (value < low || (value >= 0 && static_cast<std::uint64_t>(value) > high)) refuse(range());
      break;
  }
  switch (size_of(dtype_)) {
    case 1:
      return static_cast<std::uint8_t>(value);
    case 2:
      return static_cast<std::uint16_t>(value);
    case 4:
      return static_cast<std::uint32_t>(value);
    default:
      return static_cast<std::uint64_t>(value);
  }
}

// ---------------------------------------------------------------------------
// access
// ---------------------------------------------------------------------------

const void* tensor::host_data() const {
  if (!storage_ || count_ == 0) return nullptr;  // a count-0 view touches no storage
  const void* p = storage_->host_data();
  return p == nullptr ? nullptr : byte_at(p, offset_);
}

void* tensor::mutable_host_data() {
  if (!storage_ || count_ == 0) return nullptr;  // a count-0 view touches no storage
  void* p = storage_->mutable_host_data();
  return p == nullptr ? nullptr : byte_at(p, offset_);
}

const void* tensor::device_data(stream_view s) const { return device_bytes(&s, "device_data"); }

const void* tensor::device_data() const { return device_bytes(nullptr, "device_data"); }

void* tensor::mutable_device_data(stream_view s) { return mutable_device_bytes(&s, "mutable_device_data"); }

void* tensor::mutable_device_data() { return mutable_device_bytes(nullptr, "mutable_device_data"); }

const void* tensor::device_bytes(const stream_view* s, const char* accessor) const {
  if (!storage_) return nullptr;
  if (s != nullptr) check_stream(*s, accessor);
  if (count_ == 0) return nullptr;  // a count-0 view touches no storage
  const void* p = s != nullptr ? storage_->device_data(*s) : storage_->device_data();
  return p == nullptr ? nullptr : byte_at(p, offset_);
}

void* tensor::mutable_device_bytes(const stream_view* s, const char* accessor) {
  if (!storage_) return nullptr;
  if (s != nullptr) check_stream(*s, accessor);
  if (count_ == 0) return nullptr;  // a count-0 view touches no storage
  void* p = s != nullptr ? storage_->mutable_device_data(*s) : storage_->mutable_device_data();
  return p == nullptr ? nullptr : byte_at(p, offset_);
}

void tensor::prefetch_to_device(stream_view s) const {
  if (!storage_) return;
  check_stream(s, "prefetch_to_device");
  storage_->prefetch_to_device(s);
}

void tensor::prefetch_to_host() const {
  if (storage_) storage_->prefetch_to_host();
}

void tensor::synchronize() const {
  if (storage_) storage_->synchronize();
}

namespace {
std::vector<synced_memory*> storages_of(std::span<const tensor> tensors) {
  std::vector<synced_memory*> out;
  out.reserve(tensors.size());
  for (const tensor& t : tensors) {
    if (t.has_storage()) out.push_back(t.storage().get());
  }
  return out;
}
}  // namespace

void prefetch_to_device(std::span<const tensor> tensors, stream_view s) { prefetch_to_device(storages_of(tensors), s); }

void prefetch_to_host(std::span<const tensor> tensors, stream_view s) { prefetch_to_host(storages_of(tensors), s); }

void synchronize(std::span<const tensor> tensors) { synchronize(storages_of(tensors)); }

// ---------------------------------------------------------------------------
// views
// ---------------------------------------------------------------------------

tensor tensor::view(const syncmem::shape& s) const {
  SYNCMEM_EXPECTS(storage_ != nullptr,
                  fmt::format("{}: view{} of a tensor without storage", describe(), s.to_string()));
  SYNCMEM_EXPECTS(s.count() == count_, fmt::format("{}: view{} has {} elements; a view must keep the count of {}",
                                                   describe(), s.to_string(), s.count(), count_));
  tensor v{*this};
  v.shape_ = s;
  v.reallocations_ = 0;
  return v;
}

tensor tensor::slice(std::int64_t begin, std::int64_t end) const {
  SYNCMEM_EXPECTS(num_axes() >= 1,
                  fmt::format("{}: slice({}, {}) needs a first axis; the tensor has none", describe(), begin, end));
  const std::int64_t rows = shape_[0];
  SYNCMEM_EXPECTS(
      begin >= 0 && begin <= end && end <= rows,
      fmt::format("{}: slice({}, {}) is out of range: it needs 0 <= begin <= end <= {}", describe(), begin, end, rows));
  const std::int64_t row = shape_.count(1);
  tensor v{*this};
  v.shape_ = shape_.with_extent(0, end - begin);
  v.count_ = v.shape_.count();
  v.offset_ = offset_ + static_cast<std::size_t>(begin * row) * itemsize();
  v.reallocations_ = 0;
  return v;
}

tensor tensor::clone() const { return storage_ ? clone(storage_->device()) : tensor{dtype_}; }

tensor tensor::clone(device_id target) const {
  if (!storage_) return tensor{dtype_};
  tensor copy{dtype_, shape_, target, options_like(*storage_, target)};
  copy.copy_from(*this);
  return copy;
}

// ---------------------------------------------------------------------------
// reshape
// ---------------------------------------------------------------------------

void tensor::reshape(const syncmem::shape& s, resize_mode mode) {
  const std::size_t bytes = checked_bytes(dtype_, s);
  if (!storage_) {
    storage_ = std::make_shared<synced_memory>(bytes, current_device());
    offset_ = 0;
    if (bytes > 0) ++reallocations_;
  } else if (s != shape_ || mode == resize_mode::discard) {
    // A storage shared with no one, viewed from its start, may be resized to fit.
    const bool alone = storage_.use_count() == 1 && offset_ == 0;
    const bool within_capacity = bytes <= storage_->capacity() - offset_;
    if (alone) {
      storage_->resize(bytes, mode);  // in place; grows past capacity only when it must
    } else if (within_capacity) {
      // Never shrink what others may view; grow (within capacity) past the end only.
      if (offset_ + bytes > storage_->size()) storage_->resize(offset_ + bytes, resize_mode::keep);
    } else {
      // Detach: a storage of our own; the other views keep theirs untouched.
      const device_id device = storage_->device();
      auto fresh = std::make_shared<synced_memory>(bytes, device, options_like(*storage_, device));
      if (mode == resize_mode::keep && storage_->state() != sync_state::uninitialized) {
        copy_range(*fresh, 0, *storage_, offset_, std::min(bytes, nbytes()), nullptr);
      }
      storage_ = std::move(fresh);
      offset_ = 0;
    }
    if (!within_capacity) ++reallocations_;
  }
  shape_ = s;
  count_ = s.count();
}

// ---------------------------------------------------------------------------
// contents
// ---------------------------------------------------------------------------

void tensor::copy_from(const tensor& source) { copy_impl(source, nullptr); }
void tensor::copy_from(const tensor& source, stream_view s) { copy_impl(source, &s); }

void tensor::copy_impl(const tensor& source, const stream_view* s) {
  SYNCMEM_EXPECTS(source.dtype_ == dtype_ && source.shape_ == shape_ && source.count_ == count_,
                  fmt::format("{}: copy_from needs a source of the same dtype and shape; the source is {}", describe(),
                              source.describe()));
  if (s != nullptr) {
    SYNCMEM_EXPECTS(storage_ == nullptr || s->device() == storage_->device(),
                    fmt::format("{}: copy_from was given a stream of {}; it must belong to the destination's device",
                                describe(), syncmem::to_string(s->device())));
  }
  if (count_ == 0) return;
  if (source.storage_ == storage_) {
    if (source.offset_ == offset_) return;  // the same elements
    const bool disjoint = source.offset_ + nbytes() <= offset_ || offset_ + nbytes() <= source.offset_;
    SYNCMEM_EXPECTS(disjoint,
                    fmt::format("{}: copy_from a view that overlaps it (bytes [{}, {}) into [{}, {}) of "
                                "one storage)",
                                describe(), source.offset_, source.offset_ + nbytes(), offset_, offset_ + nbytes()));
  }
  copy_range(*storage_, offset_, *source.storage_, source.offset_, nbytes(), s);
}

void tensor::fill_bits(std::uint64_t bits, const stream_view* s) {
  if (s != nullptr && storage_) check_stream(*s, "fill");
  if (count_ == 0) return;
  const sync_state state = storage_->state();
  const auto n = static_cast<std::size_t>(count_);
  if (s == nullptr && (state == sync_state::at_host || state == sync_state::uninitialized)) {
    detail::host_math::fill(mutable_host_data(), n, itemsize(), bits);
    return;
  }
  const stream_view stream = s != nullptr ? *s : default_stream(storage_->device());
  void* p = mutable_device_data(stream);
  device_guard guard{stream.device()};
  detail::kernels_for(stream.device().kind()).fill(stream, p, n, itemsize(), bits);
}

void tensor::zero() { zero_bytes(nullptr); }
void tensor::zero(stream_view s) { zero_bytes(&s); }

void tensor::zero_bytes(const stream_view* s) {
  if (s != nullptr && storage_) check_stream(*s, "zero");
  if (count_ == 0) return;
  const sync_state state = storage_->state();
  if (s == nullptr && (state == sync_state::at_host || state == sync_state::uninitialized)) {
    std::memset(mutable_host_data(), 0, nbytes());
    return;
  }
  const stream_view stream = s != nullptr ? *s : default_stream(storage_->device());
  void* p = mutable_device_data(stream);
  device_guard guard{stream.device()};
  detail::backend_for(stream.device()).memset_async(p, 0, nbytes(), stream.device().index(), stream.handle());
}

bool allclose(const tensor& a, const tensor& b, double rtol, double atol, bool equal_nan) {
  if (a.shape() != b.shape() || a.count() != b.count()) return false;
  if (a.count() == 0) return true;
  const void* pa = a.host_data();
  const void* pb = b.host_data();
  const auto n = static_cast<std::size_t>(a.count());
  for (std::size_t i = 0; i < n; ++i) {
    const double x = element_as_double(a.dtype(), pa, i);
    const double y = element_as_double(b.dtype(), pb, i);
    if (std::isnan(x) || std::isnan(y)) {
      if (equal_nan && std::isnan(x) && std::isnan(y)) continue;
      return false;
    }
    if (x == y) continue;  // equal infinities too
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) return false;
  }
  return true;
}

}  // namespace syncmem
