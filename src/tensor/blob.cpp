#include "syncmem/blob.hpp"

#include <array>
#include <ostream>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/host_math.hpp"
#include "backend/kernels.hpp"
#include "core/ignored_failure.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"

namespace syncmem {

namespace {

synced_memory_options diff_options(synced_memory_options options) {
  if (!options.label.empty()) options.label += ".diff";
  return options;
}

std::string name_of(const tensor& t) { return t.label().empty() ? std::string{"unlabelled"} : t.label(); }

// Where a Caffe-style operation without a stream runs.
enum class side : std::uint8_t { nowhere, host, device };

side side_of(const tensor& t) {
  switch (t.state()) {
    case sync_state::uninitialized:
      return side::nowhere;
    case sync_state::at_host:
      return side::host;
    case sync_state::at_device:
    case sync_state::synced:
      return side::device;
  }
  return side::nowhere;
}

// A reduction on the device, in order on s; waits for its result.
double device_reduce(const tensor& t, detail::reduction r, stream_view s) {
  const auto n = static_cast<std::size_t>(t.count());
  if (n == 0) return 0;
  const void* x = t.device_data(s);
  device_guard guard{s.device()};
  auto& kernels = detail::kernels_for(s.device().kind());
  auto& resource = mr::get_per_device_resource(s.device());
  const std::size_t scratch_bytes = kernels.reduce_scratch_bytes(n);
  struct scratch_memory {
    mr::memory_resource& resource;
    std::size_t bytes;
    stream_view stream;
    void* p;
    ~scratch_memory() { resource.deallocate(p, bytes, stream); }  // stream-ordered after the read below
  } scratch{resource, scratch_bytes, s, resource.allocate(scratch_bytes, s)};
  kernels.reduce(s, t.dtype(), r, x, n, scratch.p);
  double result = 0;
  copy(&result, scratch.p, sizeof result, s);
  return result;
}

double reduce(const tensor& t, detail::reduction r, const stream_view* s) {
  if (t.count() == 0) return 0;
  if (s != nullptr) return device_reduce(t, r, *s);
  switch (side_of(t)) {
    case side::nowhere:
      return 0;
    case side::host:
      return detail::host_math::reduce(t.dtype(), r, t.host_data(), static_cast<std::size_t>(t.count()));
    case side::device:
      return device_reduce(t, r, default_stream(t.device()));
  }
  return 0;
}

void scale(tensor& t, double factor, const stream_view* s) {
  const auto n = static_cast<std::size_t>(t.count());
  if (n == 0) return;
  const side where = s != nullptr ? side::device : side_of(t);
  if (where == side::nowhere) return;  // zeros stay zeros
  if (where == side::host) {
    detail::host_math::scale(t.dtype(), t.mutable_host_data(), n, factor);
    return;
  }
  const stream_view stream = s != nullptr ? *s : default_stream(t.device());
  void* x = t.mutable_device_data(stream);
  device_guard guard{stream.device()};
  detail::kernels_for(stream.device().kind()).scale(stream, t.dtype(), x, n, factor);
}

}  // namespace

// ---------------------------------------------------------------------------
// construction and shape
// ---------------------------------------------------------------------------

blob::blob(syncmem::dtype type, const syncmem::shape& s, device_id device, synced_memory_options options)
    : data_{type, s, device, options}, diff_{type, s, device, diff_options(options)} {}

blob::blob(syncmem::dtype type, const syncmem::shape& s, synced_memory_options options)
    : blob{type, s, current_device(), std::move(options)} {}

blob::blob(const syncmem::shape& s, device_id device, syncmem::dtype type, synced_memory_options options)
    : blob{type, s, device, std::move(options)} {}

blob::blob(const syncmem::shape& s, syncmem::dtype type, synced_memory_options options)
    : blob{type, s, current_device(), std::move(options)} {}

blob::blob(std::int64_t num, std::int64_t channels, std::int64_t height, std::int64_t width, syncmem::dtype type)
    : blob{type, syncmem::shape{num, channels, height, width}} {}

void blob::reshape(const syncmem::shape& s) {
  const syncmem::shape old = data_.shape();
  const bool had_storage = data_.has_storage();
  data_.reshape(s);
  try {
    if (!diff_.has_storage() && data_.has_storage()) {
      // Give the diff its storage on the data's device (a default blob binds both now).
      diff_ = tensor{data_.dtype(), s, data_.device(), diff_options({})};
    } else {
      diff_.reshape(s);
    }
  } catch (...) {
    // Put the data back as it was: its old shape fits what it holds now.
    try {
      if (had_storage) {
        data_.reshape(old);
      } else {
        data_ = tensor{data_.dtype()};
      }
    } catch (...) {
      // the first failure is the one to report
      detail::log_ignored("restoring a blob's data after a failed reshape");
    }
    throw;
  }
}

void blob::reshape(std::int64_t num, std::int64_t channels, std::int64_t height, std::int64_t width) {
  reshape(syncmem::shape{num, channels, height, width});
}

std::string blob::shape_string() const {
  return fmt::format("{}{}({})", fmt::join(shape().extents(), " "), num_axes() > 0 ? " " : "", count());
}

std::int64_t blob::legacy_shape(int axis) const {
  SYNCMEM_EXPECTS(num_axes() <= 4, fmt::format("blob '{}' of shape {}: legacy accessors (num, channels, height, "
                                               "width) need at most 4 axes",
                                               name_of(data_), shape().to_string()));
  if (axis >= num_axes() || axis < -num_axes()) return 1;  // an axis the blob lacks
  return shape(axis);
}

std::int64_t blob::offset(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) const {
  const std::int64_t extents[] = {num(), channels(), height(), width()};
  const std::int64_t indices[] = {n, c, h, w};
  static constexpr const char* names[] = {"n", "c", "h", "w"};
  for (int i = 0; i < 4; ++i) {
    SYNCMEM_EXPECTS(indices[i] >= 0 && indices[i] <= extents[i],
                    fmt::format("blob '{}' of shape {}: offset index {} = {} is out of range 0..{}", name_of(data_),
                                shape().to_string(), names[i], indices[i], extents[i]));
  }
  return ((n * channels() + c) * height() + h) * width() + w;
}

std::int64_t blob::offset(std::span<const std::int64_t> indices) const {
  SYNCMEM_EXPECTS(indices.size() <= static_cast<std::size_t>(num_axes()),
                  fmt::format("blob '{}' of shape {}: offset of {} indices; it has {} axes", name_of(data_),
                              shape().to_string(), indices.size(), num_axes()));
  std::int64_t offset = 0;
  for (int i = 0; i < num_axes(); ++i) {
    offset *= shape(i);
    if (static_cast<std::size_t>(i) < indices.size()) {
      const std::int64_t index = indices[static_cast<std::size_t>(i)];
      SYNCMEM_EXPECTS(index >= 0 && index < shape(i),
                      fmt::format("blob '{}' of shape {}: offset index {} of axis {} is out of range 0..{}",
                                  name_of(data_), shape().to_string(), index, i, shape(i) - 1));
      offset += index;
    }
  }
  return offset;
}

// ---------------------------------------------------------------------------
// sharing and copying
// ---------------------------------------------------------------------------

namespace {

// `ours` becomes a view, under its own shape, of the storage `theirs` uses.
void share(tensor& ours, const tensor& theirs, const char* operation, const char* what) {
  SYNCMEM_EXPECTS(theirs.count() == ours.count() && theirs.dtype() == ours.dtype(),
                  fmt::format("{}: blob '{}' ({} {}) cannot share the {} of '{}' ({} {}): count and dtype must match",
                              operation, name_of(ours), syncmem::to_string(ours.dtype()), ours.shape().to_string(),
                              what, name_of(theirs), syncmem::to_string(theirs.dtype()), theirs.shape().to_string()));
  if (!theirs.has_storage() || !ours.has_storage()) return;  // nothing to share: both have count 0
  SYNCMEM_EXPECTS(
      ours.device() == theirs.device(),
      fmt::format("{}: blob '{}' on {} cannot share the {} of '{}' on {}", operation, name_of(ours),
                  syncmem::to_string(ours.device()), what, name_of(theirs), syncmem::to_string(theirs.device())));
  ours = theirs.view(ours.shape());
}

}  // namespace

void blob::share_data(const blob& other) { share(data_, other.data_, "share_data", "data"); }
void blob::share_diff(const blob& other) { share(diff_, other.diff_, "share_diff", "diff"); }

void blob::copy_from(const blob& source, bool copy_diff, bool reshape_to_fit) {
  SYNCMEM_EXPECTS(source.dtype() == dtype(),
                  fmt::format("blob '{}' of dtype {}: copy_from a blob of dtype {}", name_of(data_),
                              syncmem::to_string(dtype()), syncmem::to_string(source.dtype())));
  if (source.shape() != shape() || source.count() != count()) {
    SYNCMEM_EXPECTS(reshape_to_fit, fmt::format("blob '{}' of shape {}: copy_from a blob of shape {} (pass "
                                                "reshape_to_fit = true to reshape first)",
                                                name_of(data_), shape().to_string(), source.shape().to_string()));
    reshape_like(source);
  }
  if (copy_diff) {
    diff_.copy_from(source.diff_);
  } else {
    data_.copy_from(source.data_);
  }
}

// ---------------------------------------------------------------------------
// math
// ---------------------------------------------------------------------------

std::string blob::describe() const {
  if (!data_.has_storage()) {
    return fmt::format("blob {} {} without storage", syncmem::to_string(dtype()), shape().to_string());
  }
  return fmt::format("blob '{}' {} {} on {}", name_of(data_), syncmem::to_string(dtype()), shape().to_string(),
                     syncmem::to_string(device()));
}

void blob::throw_type_mismatch(syncmem::dtype asked, const char* accessor) const {
  SYNCMEM_FAIL(fmt::format("{}: {}<{}>() asks for {} elements, but the blob's dtype is {}", describe(), accessor,
                           syncmem::to_string(asked), syncmem::to_string(asked), syncmem::to_string(dtype())));
}

void blob::check_stream(stream_view s, const char* accessor) const {
  if (!data_.has_storage()) return;  // nothing to order: the accessor gives nullptr
  SYNCMEM_EXPECTS(s.device() == device(),
                  fmt::format("{}: {} was given a stream of {}; streams must belong to {}", describe(), accessor,
                              syncmem::to_string(s.device()), syncmem::to_string(device())));
}

void blob::check_math(const char* operation) const {
  SYNCMEM_EXPECTS(dtype() == syncmem::dtype::float32 || dtype() == syncmem::dtype::float64,
                  fmt::format("blob '{}' of dtype {}: {} needs dtype float32 or float64", name_of(data_),
                              syncmem::to_string(dtype()), operation));
}

void blob::update() {
  check_math("update");
  if (count() == 0) return;
  side where = side_of(data_);
  // Data never written reads as zeros: work where the diff is.
  if (where == side::nowhere) where = side_of(diff_) == side::device ? side::device : side::host;
  switch (where) {
    case side::nowhere:
    case side::host:
      detail::host_math::axpy(dtype(), static_cast<std::size_t>(count()), -1.0, diff_.host_data(),
                              data_.mutable_host_data());
      return;
    case side::device:
      update(default_stream(device()));
      return;
  }
}

void blob::update(stream_view s) {
  check_math("update");
  const auto n = static_cast<std::size_t>(count());
  if (n == 0) return;
  const void* x = diff_.device_data(s);
  void* y = data_.mutable_device_data(s);
  device_guard guard{s.device()};
  detail::kernels_for(s.device().kind()).axpy(s, dtype(), n, -1.0, x, y);
}

double blob::asum_data() const {
  check_math("asum_data");
  return reduce(data_, detail::reduction::asum, nullptr);
}
double blob::asum_data(stream_view s) const {
  check_math("asum_data");
  return reduce(data_, detail::reduction::asum, &s);
}
double blob::asum_diff() const {
  check_math("asum_diff");
  return reduce(diff_, detail::reduction::asum, nullptr);
}
double blob::asum_diff(stream_view s) const {
  check_math("asum_diff");
  return reduce(diff_, detail::reduction::asum, &s);
}
double blob::sumsq_data() const {
  check_math("sumsq_data");
  return reduce(data_, detail::reduction::sumsq, nullptr);
}
double blob::sumsq_data(stream_view s) const {
  check_math("sumsq_data");
  return reduce(data_, detail::reduction::sumsq, &s);
}
double blob::sumsq_diff() const {
  check_math("sumsq_diff");
  return reduce(diff_, detail::reduction::sumsq, nullptr);
}
double blob::sumsq_diff(stream_view s) const {
  check_math("sumsq_diff");
  return reduce(diff_, detail::reduction::sumsq, &s);
}

void blob::scale_data(double factor) {
  check_math("scale_data");
  scale(data_, factor, nullptr);
}
void blob::scale_data(double factor, stream_view s) {
  check_math("scale_data");
  scale(data_, factor, &s);
}
void blob::scale_diff(double factor) {
  check_math("scale_diff");
  scale(diff_, factor, nullptr);
}
void blob::scale_diff(double factor, stream_view s) {
  check_math("scale_diff");
  scale(diff_, factor, &s);
}

std::string blob::to_string() const {
  return fmt::format("blob: data {}; diff {}", data_.to_string(), diff_.to_string());
}

std::ostream& operator<<(std::ostream& os, const blob& b) { return os << b.to_string(); }

// ---- data and diff together ---------------------------------------------------------------

namespace {
std::vector<tensor> tensors_of(std::span<const blob* const> blobs, const char* what) {
  std::vector<tensor> out;
  out.reserve(2 * blobs.size());
  for (std::size_t i = 0; i < blobs.size(); ++i) {
    SYNCMEM_EXPECTS(blobs[i] != nullptr, fmt::format("{}: blob {} of {} is null", what, i, blobs.size()));
    out.push_back(blobs[i]->data());
    out.push_back(blobs[i]->diff());
  }
  return out;
}
}  // namespace

void blob::prefetch_to_device(stream_view s) const {
  const std::array<tensor, 2> both{data_, diff_};
  syncmem::prefetch_to_device(both, s);
}

void blob::prefetch_to_host(stream_view s) const {
  const std::array<tensor, 2> both{data_, diff_};
  syncmem::prefetch_to_host(both, s);
}

void blob::synchronize() const {
  const std::array<tensor, 2> both{data_, diff_};
  syncmem::synchronize(both);
}

void prefetch_to_device(std::span<const blob* const> blobs, stream_view s) {
  prefetch_to_device(tensors_of(blobs, "prefetch_to_device"), s);
}

void prefetch_to_host(std::span<const blob* const> blobs, stream_view s) {
  prefetch_to_host(tensors_of(blobs, "prefetch_to_host"), s);
}

void synchronize(std::span<const blob* const> blobs) { synchronize(tensors_of(blobs, "synchronize")); }

}  // namespace syncmem
