// ctest-labels: threaded
// blob: Caffe's own Blob tests re-expressed (BVLC/caffe
// src/caffe/test/test_blob.cpp: initialization, pointers, reshape, legacy
// shapes, sumsq / asum / scale on each side), plus offsets, capacity reuse,
// ShareData without Caffe bug #5439, Update, and host-versus-device results.
// Typed over device kinds: emulated here, CUDA kernels on a GPU machine.
#include "syncmem/blob.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device_ops.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {

void PrintTo(sync_state state, std::ostream* os) { *os << to_string(state); }

namespace {

using test::error_of;

enum class where { host, device };

template <class T>
void fill_uniform(T* p, std::int64_t n, double low, double high) {
  std::uniform_real_distribution<double> u{low, high};
  for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(u(test::rng()));
}

// Makes the data's (or diff's) newest side `w`, as Caffe's tests do with a
// mutable access, so that the next operation runs there.
template <class T>
void move_data_to(blob& b, where w) {
  if (w == where::host) {
    (void)b.mutable_host_data<T>();
  } else {
    (void)b.mutable_device_data<T>();
  }
}
template <class T>
void move_diff_to(blob& b, where w) {
  if (w == where::host) {
    (void)b.mutable_host_diff<T>();
  } else {
    (void)b.mutable_device_diff<T>();
  }
}

template <class Kind>
class Blob : public test::device_test<Kind> {};
TYPED_TEST_SUITE(Blob, test::device_kinds, test::device_kind_names);

// ---- Caffe's BlobSimpleTest ------------------------------------------------------------

TYPED_TEST(Blob, CaffeInitialization) {
  const blob empty;
  const blob preshaped{{2, 3, 4, 5}, this->dev()};
  EXPECT_EQ(preshaped.num(), 2);
  EXPECT_EQ(preshaped.channels(), 3);
  EXPECT_EQ(preshaped.height(), 4);
  EXPECT_EQ(preshaped.width(), 5);
  EXPECT_EQ(preshaped.count(), 120);
  EXPECT_EQ(empty.num_axes(), 0);
  EXPECT_EQ(empty.count(), 0);
  EXPECT_EQ(preshaped.dtype(), dtype::float32);
  EXPECT_EQ(preshaped.device(), this->dev());
}

TYPED_TEST(Blob, CaffePointersHostDevice) {
  blob b{{2, 3, 4, 5}, this->dev()};
  EXPECT_NE(b.device_data<float>(), nullptr);
  EXPECT_NE(b.host_data<float>(), nullptr);
  EXPECT_NE(b.mutable_device_data<float>(), nullptr);
  EXPECT_NE(b.mutable_host_data<float>(), nullptr);
  EXPECT_NE(b.device_diff<float>(), nullptr);
  EXPECT_NE(b.mutable_host_diff<float>(), nullptr);
}

TYPED_TEST(Blob, CaffeReshape) {
  blob b;
  {
    device_guard guard{this->dev()};  // a default blob gets its storage on the current device
    b.reshape(2, 3, 4, 5);
  }
  EXPECT_EQ(b.num(), 2);
  EXPECT_EQ(b.channels(), 3);
  EXPECT_EQ(b.height(), 4);
  EXPECT_EQ(b.width(), 5);
  EXPECT_EQ(b.count(), 120);
  EXPECT_EQ(b.device(), this->dev());
  EXPECT_EQ(b.diff().device(), this->dev());
  EXPECT_EQ(b.diff().shape(), b.shape());
}

TYPED_TEST(Blob, CaffeReshapeZero) {
  blob b{{1}, this->dev()};
  b.reshape(shape{0, 5});
  EXPECT_EQ(b.count(), 0);
  EXPECT_EQ(b.diff().count(), 0);
}

// Caffe's TestLegacyBlobProtoShapeEquals, without protobuf: a blob of fewer
// than 4 axes has legacy shape 1 on the axes it lacks, counted from the end.
TYPED_TEST(Blob, CaffeLegacyShapes) {
  blob b{{3, 2}, this->dev()};
  EXPECT_EQ(b.legacy_shape(-4), 1);
  EXPECT_EQ(b.legacy_shape(-3), 1);
  EXPECT_EQ(b.legacy_shape(-2), 3);
  EXPECT_EQ(b.legacy_shape(-1), 2);
  b.reshape({1, 3, 2});
  EXPECT_EQ(b.legacy_shape(-4), 1);
  EXPECT_EQ(b.legacy_shape(-3), 1);
  b.reshape({2, 3, 2});
  EXPECT_EQ(b.legacy_shape(-3), 2);  // no longer (1 x 1 x 3 x 2)
  b.reshape({1, 1, 1, 1, 1});
  EXPECT_THAT(error_of([&] { (void)b.num(); }), HasSubstr("legacy accessors (num, channels, height, width) need at "
                                                          "most 4 axes"));
}

// ---- Caffe's BlobMathTest: sumsq, asum, scale on the host and on the device ----------

template <class T>
void caffe_sum_of_squares(device_id device, where w) {
  blob b{{2, 3, 4, 5}, device, dtype_of<T>()};
  const double epsilon = 1e-6;
  EXPECT_EQ(b.sumsq_data(), 0);  // uninitialized
  EXPECT_EQ(b.sumsq_diff(), 0);
  fill_uniform(b.mutable_host_data<T>(), b.count(), -3, 3);
  double expected = 0;
  const T* data = b.host_data<T>();
  for (std::int64_t i = 0; i < b.count(); ++i) expected += static_cast<double>(data[i]) * data[i];
  move_data_to<T>(b, w);
  EXPECT_NEAR(expected, b.sumsq_data(), epsilon * expected);
  EXPECT_EQ(b.sumsq_diff(), 0);
  // diff = 7 * data.
  const T* d = b.host_data<T>();
  T* diff = b.mutable_host_diff<T>();
  for (std::int64_t i = 0; i < b.count(); ++i) diff[i] = 7 * d[i];
  move_diff_to<T>(b, w);
  EXPECT_NEAR(expected, b.sumsq_data(), epsilon * expected);
  EXPECT_NEAR(expected * 49, b.sumsq_diff(), epsilon * expected * 49);
}

template <class T>
void caffe_asum(device_id device, where w) {
  blob b{{2, 3, 4, 5}, device, dtype_of<T>()};
  const double epsilon = 1e-6;
  EXPECT_EQ(b.asum_data(), 0);
  EXPECT_EQ(b.asum_diff(), 0);
  fill_uniform(b.mutable_host_data<T>(), b.count(), -3, 3);
  double expected = 0;
  const T* data = b.host_data<T>();
  for (std::int64_t i = 0; i < b.count(); ++i) expected += std::fabs(static_cast<double>(data[i]));
  move_data_to<T>(b, w);
  EXPECT_NEAR(expected, b.asum_data(), epsilon * expected);
  EXPECT_EQ(b.asum_diff(), 0);
  const T* d = b.host_data<T>();
  T* diff = b.mutable_host_diff<T>();
  for (std::int64_t i = 0; i < b.count(); ++i) diff[i] = 7 * d[i];
  move_diff_to<T>(b, w);
  EXPECT_NEAR(expected, b.asum_data(), epsilon * expected);
  EXPECT_NEAR(expected * 7, b.asum_diff(), epsilon * expected * 7);
}

template <class T>
void caffe_scale_data(device_id device, where w) {
  blob b{{2, 3, 4, 5}, device, dtype_of<T>()};
  const double epsilon = 1e-6;
  EXPECT_EQ(b.asum_data(), 0);
  EXPECT_EQ(b.asum_diff(), 0);
  fill_uniform(b.mutable_host_data<T>(), b.count(), -3, 3);
  const double asum_before = b.asum_data();
  move_data_to<T>(b, w);
  b.scale_data(3);
  EXPECT_EQ(b.data().state(), w == where::host ? sync_state::at_host : sync_state::at_device);
  EXPECT_NEAR(asum_before * 3, b.asum_data(), epsilon * asum_before * 3);
  EXPECT_EQ(b.asum_diff(), 0);
  // scale_diff too.
  const T* data = b.host_data<T>();
  T* diff = b.mutable_host_diff<T>();
  for (std::int64_t i = 0; i < b.count(); ++i) diff[i] = 7 * data[i];
  EXPECT_NEAR(asum_before * 3, b.asum_data(), epsilon * asum_before * 3);
  EXPECT_NEAR(asum_before * 21, b.asum_diff(), epsilon * asum_before * 21);
  move_diff_to<T>(b, w);
  b.scale_diff(3);
  EXPECT_NEAR(asum_before * 3, b.asum_data(), epsilon * asum_before * 3);
  EXPECT_NEAR(asum_before * 63, b.asum_diff(), epsilon * asum_before * 63);
}

TYPED_TEST(Blob, CaffeSumOfSquares) {
  for (where w : {where::host, where::device}) {
    caffe_sum_of_squares<float>(this->dev(), w);
    caffe_sum_of_squares<double>(this->dev(), w);
  }
}

TYPED_TEST(Blob, CaffeAsum) {
  for (where w : {where::host, where::device}) {
    caffe_asum<float>(this->dev(), w);
    caffe_asum<double>(this->dev(), w);
  }
}

TYPED_TEST(Blob, CaffeScaleData) {
  for (where w : {where::host, where::device}) {
    caffe_scale_data<float>(this->dev(), w);
    caffe_scale_data<double>(this->dev(), w);
  }
}

// ---- host and device agree -------------------------------------------------------------

TYPED_TEST(Blob, HostAndDeviceReductionsAgreeOnLargeFloat32Data) {
  const std::int64_t n = (std::int64_t{1} << 20) + static_cast<std::int64_t>(test::rng()() % 100'000);
  blob b{{n}, this->dev()};
  fill_uniform(b.mutable_host_data<float>(), n, -100, 100);
  fill_uniform(b.mutable_host_diff<float>(), n, -1e-3, 1e-3);
  // A reference in long double.
  long double asum = 0;
  long double sumsq = 0;
  const float* p = b.host_data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    asum += std::fabs(static_cast<long double>(p[i]));
    sumsq += static_cast<long double>(p[i]) * p[i];
  }
  const double host_asum = b.asum_data();  // the host side is newest
  const double host_sumsq = b.sumsq_data();
  const double host_diff_asum = b.asum_diff();
  const double host_diff_sumsq = b.sumsq_diff();
  stream s{this->dev()};
  const double device_asum = b.asum_data(s);
  const double device_sumsq = b.sumsq_data(s);
  // Both accumulate in double: far tighter than float32's own precision.
  EXPECT_NEAR(host_asum, static_cast<double>(asum), 1e-12 * static_cast<double>(asum));
  EXPECT_NEAR(host_sumsq, static_cast<double>(sumsq), 1e-12 * static_cast<double>(sumsq));
  EXPECT_NEAR(device_asum, host_asum, 1e-10 * host_asum);
  EXPECT_NEAR(device_sumsq, host_sumsq, 1e-10 * host_sumsq);
  EXPECT_NEAR(b.asum_diff(s), host_diff_asum, 1e-10 * host_diff_asum);
  EXPECT_NEAR(b.sumsq_diff(s), host_diff_sumsq, 1e-10 * host_diff_sumsq);
  // Update on each side gives the same data (float32 arithmetic, one operation per element).
  blob on_device{{n}, this->dev()};
  on_device.copy_from(b);
  on_device.copy_from(b, true);
  (void)b.mutable_host_data<float>();  // the reductions left it synced: make the host side newest
  b.update();                          // so that update runs on the host
  EXPECT_EQ(b.data().state(), sync_state::at_host);
  (void)on_device.mutable_device_data<float>(s);
  on_device.update(s);
  EXPECT_EQ(on_device.data().state(), sync_state::at_device);
  EXPECT_EQ(std::memcmp(b.host_data<float>(), on_device.host_data<float>(), static_cast<std::size_t>(n) * 4), 0);
}

TYPED_TEST(Blob, UpdateSubtractsTheDiffOnEitherSide) {
  for (where w : {where::host, where::device}) {
    blob b{{4, 8}, this->dev(), dtype::float64};
    auto* data = b.mutable_host_data<double>();
    auto* diff = b.mutable_host_diff<double>();
    for (int i = 0; i < 32; ++i) {
      data[i] = i * 1.5;
      diff[i] = i * 0.25 - 2;
    }
    move_data_to<double>(b, w);
    b.update();
    EXPECT_EQ(b.data().state(), w == where::host ? sync_state::at_host : sync_state::at_device);
    const double* after = b.host_data<double>();
    for (int i = 0; i < 32; ++i) EXPECT_EQ(after[i], i * 1.5 - (i * 0.25 - 2)) << i;
  }
  // An uninitialized blob's data reads as zeros: update gives -diff.
  blob z{{3}, this->dev()};
  z.mutable_host_diff<float>()[1] = 2.0F;
  z.update();
  EXPECT_EQ(z.host_data<float>()[1], -2.0F);
}

TYPED_TEST(Blob, OperationsOnAStreamRunInItsOrder) {
  test::scoped_emulated_delay delay{std::chrono::microseconds{100}};
  blob b{{1000}, this->dev()};
  std::fill_n(b.mutable_host_data<float>(), 1000, 2.0F);
  std::fill_n(b.mutable_host_diff<float>(), 1000, 0.5F);
  stream s{this->dev()};
  (void)b.mutable_device_data<float>(s);
  test::device_sleep(s, std::chrono::milliseconds{30});
  b.scale_data(4, s);   // 8
  b.update(s);          // 7.5
  b.scale_diff(-2, s);  // diff -1
  b.update(s);          // 8.5
  EXPECT_DOUBLE_EQ(b.asum_data(s), 8500.0);
  EXPECT_DOUBLE_EQ(b.sumsq_diff(s), 1000.0);
  const float* p = b.host_data<float>();
  EXPECT_EQ(std::count(p, p + 1000, 8.5F), 1000);
}

// ---- shape queries and offsets --------------------------------------------------------------

TYPED_TEST(Blob, CountsAxesAndShapeString) {
  blob b{{2, 3, 4, 5}, this->dev()};
  EXPECT_EQ(b.num_axes(), 4);
  EXPECT_EQ(b.count(1), 60);
  EXPECT_EQ(b.count(1, 3), 12);
  EXPECT_EQ(b.shape(-1), 5);
  EXPECT_EQ(b.shape(0), 2);
  EXPECT_EQ(b.canonical_axis_index(-3), 1);
  EXPECT_EQ(b.shape_string(), "2 3 4 5 (120)");
  EXPECT_THAT(error_of([&] { (void)b.shape(4); }), HasSubstr("axis 4 is out of range"));
  EXPECT_THAT(error_of([&] { (void)b.canonical_axis_index(-5); }), HasSubstr("valid axes are -4..3"));
  EXPECT_THAT(error_of([&] { (void)b.count(2, 5); }), HasSubstr("count(2, 5)"));
  EXPECT_EQ(blob{}.shape_string(), "(0)");
  blob scalar{shape{}, this->dev()};
  EXPECT_EQ(scalar.shape_string(), "(1)");
}

TYPED_TEST(Blob, CaffeOffsets) {
  blob b{{2, 3, 4, 5}, this->dev()};
  for (std::int64_t n = 0; n < 2; ++n) {
    for (std::int64_t c = 0; c < 3; ++c) {
      for (std::int64_t h = 0; h < 4; ++h) {
        for (std::int64_t w = 0; w < 5; ++w) {
          const std::int64_t expected = ((n * 3 + c) * 4 + h) * 5 + w;
          ASSERT_EQ(b.offset(n, c, h, w), expected);
          const std::vector<std::int64_t> indices{n, c, h, w};
          ASSERT_EQ(b.offset(indices), expected);
        }
      }
    }
  }
  const std::vector<std::int64_t> leading{1, 2};
  EXPECT_EQ(b.offset(leading), b.offset(1, 2));
  EXPECT_EQ(b.offset(2), 120);  // as Caffe: an index may equal its extent
  EXPECT_THAT(error_of([&] { (void)b.offset(0, 4); }), HasSubstr("offset index c = 4 is out of range 0..3"));
  EXPECT_THAT(error_of([&] { (void)b.offset(-1); }), HasSubstr("offset index n = -1"));
  const std::vector<std::int64_t> bad{0, 3};
  EXPECT_THAT(error_of([&] { (void)b.offset(bad); }), HasSubstr("offset index 3 of axis 1 is out of range 0..2"));
  const std::vector<std::int64_t> too_many{0, 0, 0, 0, 0};
  EXPECT_THAT(error_of([&] { (void)b.offset(too_many); }), HasSubstr("offset of 5 indices; it has 4 axes"));
  blob two{{6, 7}, this->dev()};
  EXPECT_EQ(two.offset(5, 6), 41);
}

// ---- capacity, sharing ------------------------------------------------------------------------

// Caffe's Reshape reallocates only when the count exceeds the capacity: the
// data pointer stays the same within it.
TYPED_TEST(Blob, ReshapeKeepsThePointersWithinCapacity) {
  blob b{{4, 3, 8, 8}, this->dev()};
  const float* host = b.mutable_host_data<float>();
  const float* device = b.mutable_device_diff<float>();
  for (const shape& s : {shape{2, 3, 8, 8}, shape{4, 3, 8, 8}, shape{1, 768}, shape{768}}) {
    b.reshape(s);
    EXPECT_EQ(b.mutable_host_data<float>(), host);
    EXPECT_EQ(b.mutable_device_diff<float>(), device);
    EXPECT_EQ(b.capacity(), 768);
    EXPECT_EQ(b.data().reallocations(), 0U);
    EXPECT_EQ(b.diff().reallocations(), 0U);
  }
  b.reshape(5, 3, 8, 8);
  EXPECT_EQ(b.data().reallocations(), 1U);
  EXPECT_EQ(b.capacity(), 960);
}

// Caffe bug #5439: ShareData left capacity_ as it was, so that a later
// Reshape within that stale capacity reused the other blob's smaller memory
// and ran past its end. Here the capacity is that of the storage held.
TYPED_TEST(Blob, ShareDataUpdatesTheCapacityCaffeBug5439) {
  blob a{{100}, this->dev(), dtype::float32, {.label = "a"}};
  a.reshape({10});  // capacity stays 100
  EXPECT_EQ(a.capacity(), 100);
  blob b{{10}, this->dev(), dtype::float32, {.label = "b"}};
  std::fill_n(b.mutable_host_data<float>(), 10, 3.0F);
  a.share_data(b);
  EXPECT_TRUE(a.data().shares_storage_with(b.data()));
  EXPECT_EQ(a.capacity(), 10);  // Caffe kept 100
  EXPECT_EQ(a.host_data<float>(), b.host_data<float>());
  EXPECT_EQ(a.host_data<float>()[9], 3.0F);
  // Grow within the stale capacity: Caffe reused b's 10 floats for 50; here a
  // detaches into storage of its own and b is untouched.
  a.reshape({50});
  EXPECT_FALSE(a.data().shares_storage_with(b.data()));
  EXPECT_EQ(a.data().reallocations(), 1U);
  EXPECT_GE(a.data().storage()->size(), 50U * 4);
  std::fill_n(a.mutable_host_data<float>(), 50, -1.0F);  // all 50, in bounds (ASan checks)
  EXPECT_EQ(std::count(b.host_data<float>(), b.host_data<float>() + 10, 3.0F), 10);
  EXPECT_EQ(b.data().storage()->size(), 40U);
  EXPECT_EQ(b.capacity(), 10);
  // The diff was never shared: a's own, with its own capacity.
  EXPECT_EQ(a.diff().capacity(), 100);
}

TYPED_TEST(Blob, ShareDiffAndItsErrors) {
  blob a{{2, 5}, this->dev()};
  blob b{{10}, this->dev()};
  a.share_diff(b);
  EXPECT_TRUE(a.diff().shares_storage_with(b.diff()));
  EXPECT_EQ(a.diff().shape(), (shape{2, 5}));  // a keeps its shape
  a.mutable_host_diff<float>()[7] = 4.0F;
  EXPECT_EQ(b.host_diff<float>()[7], 4.0F);
  EXPECT_FALSE(a.data().shares_storage_with(b.data()));
  blob other_count{{11}, this->dev()};
  EXPECT_THAT(error_of([&] { a.share_data(other_count); }),
              HasSubstr("share_data: blob 'unlabelled' (float32 (2, 5)) cannot share the data of 'unlabelled' "
                        "(float32 (11)): count and dtype must match"));
  blob other_type{{10}, this->dev(), dtype::float64};
  EXPECT_THAT(error_of([&] { a.share_diff(other_type); }), HasSubstr("count and dtype must match"));
  if (this->count() >= 2) {
    blob elsewhere{{10}, this->dev(1)};
    EXPECT_THAT(error_of([&] { a.share_data(elsewhere); }), HasSubstr("on " + to_string(this->dev(1))));
  }
  EXPECT_FALSE(a.data().shares_storage_with(other_count.data()));
}

TYPED_TEST(Blob, CopyFromDataOrDiffWithOrWithoutReshape) {
  blob src{{3, 4}, this->dev()};
  for (int i = 0; i < 12; ++i) {
    src.mutable_host_data<float>()[i] = static_cast<float>(i);
    src.mutable_host_diff<float>()[i] = static_cast<float>(-i);
  }
  blob dst{{12}, this->dev(), dtype::float32, {.label = "dst"}};
  EXPECT_THAT(error_of([&] { dst.copy_from(src); }),
              HasSubstr("blob 'dst' of shape (12): copy_from a blob of shape (3, 4) (pass reshape_to_fit = true"));
  dst.copy_from(src, false, true);
  EXPECT_EQ(dst.shape(), (shape{3, 4}));
  EXPECT_EQ(dst.host_data<float>()[11], 11.0F);
  EXPECT_EQ(dst.host_diff<float>()[11], 0.0F);
  dst.copy_from(src, true);
  EXPECT_EQ(dst.host_diff<float>()[11], -11.0F);
  blob doubles{{3, 4}, this->dev(), dtype::float64};
  EXPECT_THAT(error_of([&] { doubles.copy_from(src); }), HasSubstr("copy_from a blob of dtype float32"));
}

TYPED_TEST(Blob, MathNeedsAFloatingPointDtype) {
  blob b{{4}, this->dev(), dtype::int32, {.label = "counts"}};
  EXPECT_THAT(error_of([&] { (void)b.asum_data(); }),
              HasSubstr("blob 'counts' of dtype int32: asum_data needs dtype float32 or float64"));
  EXPECT_THAT(error_of([&] { b.update(); }), HasSubstr("update needs"));
  EXPECT_THAT(error_of([&] { b.scale_diff(2); }), HasSubstr("scale_diff needs"));
  EXPECT_EQ(b.host_data<std::int32_t>()[0], 0);  // typed access works for any dtype
}

// The constructor in tensor's order (dtype, shape, device, options) makes the
// same blob as the first release's (shape, device, dtype, options).
TYPED_TEST(Blob, ConstructsInTensorsArgumentOrder) {
  blob b{dtype::float64, {2, 3}, this->dev(), {.label = "w"}};
  const blob old_order{{2, 3}, this->dev(), dtype::float64, {.label = "w"}};
  for (const blob* x : {static_cast<const blob*>(&b), &old_order}) {
    EXPECT_EQ(x->dtype(), dtype::float64);
    EXPECT_EQ(x->shape(), (shape{2, 3}));
    EXPECT_EQ(x->device(), this->dev());
    EXPECT_EQ(x->data().label(), "w");
    EXPECT_EQ(x->diff().label(), "w.diff");
  }
  const blob here{dtype::int8, {5}};
  EXPECT_EQ(here.dtype(), dtype::int8);
  EXPECT_EQ(here.device(), current_device());
  std::vector<double> values(6);
  fill_uniform(values.data(), 6, -10, 10);
  std::copy(values.begin(), values.end(), b.mutable_host_data<double>());
  stream s{this->dev()};
  const auto on_device = test::read_device(s, b.device_data<double>(s), 6 * sizeof(double));
  EXPECT_EQ(std::memcmp(on_device.data(), values.data(), on_device.size()), 0);
}

// A typed accessor with the wrong T, or a stream of another device, names
// the blob and the call made (host_diff, not the tensor's host_data).
TYPED_TEST(Blob, AccessorErrorsNameTheBlobAndTheCallMade) {
  blob b{{2, 3}, this->dev(), dtype::float32, {.label = "fc1"}};
  stream s{this->dev()};
  using I = std::int32_t;
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"host_data", [&] { (void)b.host_data<I>(); }},
      {"mutable_host_data", [&] { (void)b.mutable_host_data<I>(); }},
      {"device_data", [&] { (void)b.device_data<I>(s); }},
      {"device_data", [&] { (void)b.device_data<I>(); }},
      {"mutable_device_data", [&] { (void)b.mutable_device_data<I>(s); }},
      {"mutable_device_data", [&] { (void)b.mutable_device_data<I>(); }},
      {"host_diff", [&] { (void)b.host_diff<I>(); }},
      {"mutable_host_diff", [&] { (void)b.mutable_host_diff<I>(); }},
      {"device_diff", [&] { (void)b.device_diff<I>(s); }},
      {"device_diff", [&] { (void)b.device_diff<I>(); }},
      {"mutable_device_diff", [&] { (void)b.mutable_device_diff<I>(s); }},
      {"mutable_device_diff", [&] { (void)b.mutable_device_diff<I>(); }},
  };
  const std::string blob_text = "syncmem: blob 'fc1' float32 (2, 3) on " + to_string(this->dev()) + ": ";
  for (const auto& [name, call] : calls) {
    EXPECT_THAT(error_of(call), ::testing::StartsWith(blob_text + name +
                                                      "<int32>() asks for int32 elements, but "
                                                      "the blob's dtype is float32 ["));
  }
  EXPECT_EQ(b.data().state(), sync_state::uninitialized);
  EXPECT_EQ(b.diff().state(), sync_state::uninitialized);
  SYNCMEM_REQUIRE_COUNT(2);
  stream other{this->dev(1)};
  const std::vector<std::pair<std::string, std::function<void()>>> stream_calls = {
      {"device_data", [&] { (void)b.device_data<float>(other); }},
      {"mutable_device_data", [&] { (void)b.mutable_device_data<float>(other); }},
      {"device_diff", [&] { (void)b.device_diff<float>(other); }},
      {"mutable_device_diff", [&] { (void)b.mutable_device_diff<float>(other); }},
  };
  for (const auto& [name, call] : stream_calls) {
    EXPECT_THAT(error_of(call),
                ::testing::StartsWith(blob_text + name + " was given a stream of " + to_string(this->dev(1)) +
                                      "; streams must belong to " + to_string(this->dev())));
  }
}

TYPED_TEST(Blob, LabelsAndDescription) {
  blob b{{2, 2}, this->dev(), dtype::float32, {.label = "conv1.weight"}};
  EXPECT_EQ(b.data().label(), "conv1.weight");
  EXPECT_EQ(b.diff().label(), "conv1.weight.diff");
  EXPECT_THAT(b.to_string(), HasSubstr("blob: data tensor 'conv1.weight' float32 (2, 2)"));
  EXPECT_THAT(b.to_string(), HasSubstr("diff tensor 'conv1.weight.diff'"));
  blob moved = std::move(b);
  EXPECT_EQ(moved.count(), 4);
}

// A blob's data and diff, and a net's list of blobs, made current on the
// device and back in one batch each, every byte checked.
TYPED_TEST(Blob, BatchedPrefetchOfDataAndDiff) {
  stream s{this->dev()};
  std::vector<std::unique_ptr<blob>> net;
  std::vector<const blob*> list;
  std::vector<std::vector<float>> data, diff;
  for (int i = 0; i < 5; ++i) {
    net.push_back(std::make_unique<blob>(shape{2, 3 + i, 5}, this->dev()));
    blob& b = *net.back();
    const auto n = static_cast<std::size_t>(b.count());
    std::vector<float> a(n), g(n);
    for (std::size_t k = 0; k < n; ++k) {
      a[k] = static_cast<float>(test::rng()() % 1000);
      g[k] = static_cast<float>(test::rng()() % 1000);
    }
    std::copy(a.begin(), a.end(), b.mutable_host_data<float>());
    std::copy(g.begin(), g.end(), b.mutable_host_diff<float>());
    data.push_back(a);
    diff.push_back(g);
    list.push_back(&b);
  }
  net[0]->prefetch_to_device(s);
  EXPECT_EQ(net[0]->data().storage()->counters().to_device_copies, 1U);
  EXPECT_EQ(net[0]->diff().storage()->counters().to_device_copies, 1U);
  prefetch_to_device(list, s);
  for (std::size_t i = 0; i < net.size(); ++i) {
    const std::size_t n = data[i].size() * sizeof(float);
    std::vector<float> got(data[i].size());
    auto bytes = test::read_device(s, net[i]->device_data<float>(s), n);
    std::memcpy(got.data(), bytes.data(), n);
    EXPECT_EQ(got, data[i]) << "blob " << i << " data";
    bytes = test::read_device(s, net[i]->device_diff<float>(s), n);
    std::memcpy(got.data(), bytes.data(), n);
    EXPECT_EQ(got, diff[i]) << "blob " << i << " diff";
    EXPECT_EQ(net[i]->data().storage()->counters().to_device_copies, 1U);
    net[i]->scale_data(2.0, s);  // on the device
  }
  prefetch_to_host(list, s);
  synchronize(list);
  for (std::size_t i = 0; i < net.size(); ++i) {
    const float* h = net[i]->host_data<float>();
    for (std::size_t k = 0; k < data[i].size(); ++k) ASSERT_EQ(h[k], 2 * data[i][k]) << i << ", " << k;
  }
}

}  // namespace
}  // namespace syncmem
