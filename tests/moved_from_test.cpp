// ctest-labels: threaded
// Moved-from tensors and blobs: every public call on one is defined (the
// answers of an object without storage, or a logic_error saying so), and the
// moved-to object holds every element it was given, on the host and the
// device. Typed over device kinds: emulated here, CUDA on a GPU machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "device_ops.hpp"
#include "syncmem/blob.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/tensor.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {

void PrintTo(sync_state state, std::ostream* os) { *os << to_string(state); }

namespace {

using test::error_of;
using test::read_device;

template <class Kind>
class MovedFrom : public test::device_test<Kind> {};
TYPED_TEST_SUITE(MovedFrom, test::device_kinds, test::device_kind_names);

// ---- tensor ---------------------------------------------------------------------------

// Every public call on a float32 tensor left without storage by a move: the
// answers of `tensor{dtype::float32}`, or an error that says "without storage".
void expect_without_storage(tensor& t, device_id dev) {
  const tensor& c = t;
  EXPECT_FALSE(t.has_storage());
  EXPECT_EQ(t.storage(), nullptr);
  EXPECT_EQ(t.dtype(), dtype::float32);
  EXPECT_EQ(t.shape(), shape{});
  EXPECT_EQ(t.num_axes(), 0);
  EXPECT_EQ(t.count(), 0);
  EXPECT_EQ(t.numel(), 0U);
  EXPECT_EQ(t.itemsize(), 4U);
  EXPECT_EQ(t.nbytes(), 0U);
  EXPECT_EQ(t.capacity(), 0);
  EXPECT_EQ(t.reallocations(), 0U);
  EXPECT_EQ(t.storage_offset(), 0U);
  EXPECT_FALSE(t.shares_storage_with(t));
  EXPECT_EQ(t.label(), "");
  EXPECT_EQ(t.state(), sync_state::uninitialized);
  EXPECT_EQ(t.to_string(), "tensor float32 () without storage");
  std::ostringstream printed;
  printed << t;
  EXPECT_EQ(printed.str(), t.to_string());
  EXPECT_EQ(to_string(c), t.to_string());
  EXPECT_THAT(error_of([&] { (void)t.device(); }), HasSubstr("a tensor without storage has no device"));
  const tensor copied = c;  // a copy of a handle without storage is one too
  EXPECT_FALSE(copied.has_storage());
  EXPECT_EQ(copied.count(), 0);
  EXPECT_FALSE(copied.shares_storage_with(c));
  tensor assigned{dtype::float32, {2}, dev};
  assigned = c;
  EXPECT_FALSE(assigned.has_storage());
  EXPECT_EQ(assigned.shape(), shape{});

  stream s{dev};
  EXPECT_EQ(c.host_data(), nullptr);
  EXPECT_EQ(t.mutable_host_data(), nullptr);
  EXPECT_EQ(c.device_data(s), nullptr);
  EXPECT_EQ(c.device_data(), nullptr);
  EXPECT_EQ(t.mutable_device_data(s), nullptr);
  EXPECT_EQ(t.mutable_device_data(), nullptr);
  EXPECT_EQ(c.host_data<float>(), nullptr);
  EXPECT_EQ(t.mutable_host_data<float>(), nullptr);
  EXPECT_EQ(c.device_data<float>(s), nullptr);
  EXPECT_EQ(c.device_data<float>(), nullptr);
  EXPECT_EQ(t.mutable_device_data<float>(s), nullptr);
  EXPECT_EQ(t.mutable_device_data<float>(), nullptr);
  EXPECT_TRUE(c.host_span<float>().empty());
  EXPECT_TRUE(t.mutable_host_span<float>().empty());
  EXPECT_TRUE(c.device_span<float>(s).empty());
  EXPECT_TRUE(c.device_span<float>().empty());
  EXPECT_TRUE(t.mutable_device_span<float>(s).empty());
  EXPECT_TRUE(t.mutable_device_span<float>().empty());
  for (const std::string& message :
       {error_of([&] { (void)c.at<float>({}); }), error_of([&] { (void)c.at<float>({0}); })}) {
    EXPECT_THAT(message, HasSubstr("tensor float32 () without storage: at() has no element to give"));
  }
  EXPECT_THAT(error_of([&] { (void)t.mutable_at<float>({0}); }),
              HasSubstr("tensor float32 () without storage: mutable_at() has no element to give"));
  EXPECT_THAT(error_of([&] { (void)c.host_span<std::int32_t>(); }),
              HasSubstr("without storage: host_span<int32>() asks for int32 elements"));

  c.prefetch_to_device(s);
  c.prefetch_to_host();
  c.synchronize();
  prefetch_to_device(std::span<const tensor>{&t, 1}, s);
  prefetch_to_host(std::span<const tensor>{&t, 1}, s);
  synchronize(std::span<const tensor>{&t, 1});
  EXPECT_THAT(error_of([&] { (void)c.view(shape{}); }), HasSubstr("view() of a tensor without storage"));
  EXPECT_THAT(error_of([&] { (void)c.slice(0, 0); }), HasSubstr("slice(0, 0) needs a first axis"));
  EXPECT_FALSE(c.clone().has_storage());
  EXPECT_FALSE(c.clone(dev).has_storage());
  t.fill(1);
  t.fill(1, s);
  t.zero();
  t.zero(s);
  t.copy_from(tensor{dtype::float32});
  t.copy_from(tensor{dtype::float32}, s);
  const tensor four{dtype::float32, {4}, dev};
  EXPECT_THAT(error_of([&] { t.copy_from(four); }), HasSubstr("copy_from needs a source of the same dtype and shape"));
  tensor into{dtype::float32, {4}, dev};
  EXPECT_THAT(error_of([&] { into.copy_from(c); }), HasSubstr("the source is tensor float32 () without storage"));
  EXPECT_TRUE(allclose(c, tensor{dtype::float32}));
  EXPECT_FALSE(allclose(c, four));
  // None of these gave it storage.
  EXPECT_FALSE(t.has_storage());
  EXPECT_EQ(t.count(), 0);
}

// Fresh random floats written on the host (or the device, on `s`); returned.
std::vector<float> write_random(tensor& t, bool on_device, stream_view s) {
  std::vector<float> values(t.numel());
  for (auto& v : values) v = static_cast<float>(test::rng()() % 1000003) / 7.0F - 5000.0F;
  if (on_device) {
    copy(t.mutable_device_data<float>(s), values.data(), t.nbytes(), s);
  } else {
    std::copy(values.begin(), values.end(), t.mutable_host_span<float>().begin());
  }
  return values;
}

void expect_values(const tensor& t, const std::vector<float>& values, stream_view s) {
  ASSERT_EQ(t.numel(), values.size());
  const auto on_device = read_device(s, t.device_data<float>(s), t.nbytes());
  EXPECT_EQ(std::memcmp(on_device.data(), values.data(), t.nbytes()), 0);
  const std::span<const float> host = t.host_span<float>();
  for (std::size_t i = 0; i < values.size(); ++i) ASSERT_EQ(host[i], values[i]) << "element " << i;
}

TYPED_TEST(MovedFrom, ATensorIsATensorWithoutStorage) {
  const device_guard on{this->dev()};  // reshape gives storage on the current device
  for (const bool on_device : {false, true}) {
    stream s{this->dev()};
    const std::int64_t n = 1 + static_cast<std::int64_t>(test::rng()() % 5000);
    tensor a{dtype::float32, {n}, this->dev(), {.label = "a"}};
    const std::vector<float> values = write_random(a, on_device, s);
    const sync_state state = a.state();
    const tensor view = a.slice(0, n);  // another holder of the storage keeps its bytes
    tensor b = std::move(a);
    expect_without_storage(a, this->dev());  // NOLINT(bugprone-use-after-move): the moved-from contract
    EXPECT_EQ(b.label(), "a");
    EXPECT_EQ(b.device(), this->dev());
    EXPECT_EQ(b.shape(), shape{n});
    EXPECT_EQ(b.state(), state);
    EXPECT_TRUE(b.shares_storage_with(view));
    expect_values(b, values, s);
    expect_values(view, values, s);
    // reshape gives the moved-from tensor storage again.
    a.reshape({3, 2});
    EXPECT_EQ(a.count(), 6);
    const std::vector<float> again = write_random(a, on_device, s);
    expect_values(a, again, s);
  }
}

TYPED_TEST(MovedFrom, AMoveAssignedTensorIsATensorWithoutStorage) {
  for (const bool on_device : {false, true}) {
    stream s{this->dev()};
    const std::int64_t n = 1 + static_cast<std::int64_t>(test::rng()() % 5000);
    tensor a{dtype::float32, {n, 1}, this->dev(), {.label = "source"}};
    const std::vector<float> values = write_random(a, on_device, s);
    tensor b{dtype::float32, {7}, this->dev(), {.label = "target"}};
    (void)write_random(b, !on_device, s);
    const std::weak_ptr<synced_memory> old_storage = b.storage();
    b = std::move(a);
    EXPECT_TRUE(old_storage.expired());      // the target's storage was released, not leaked
    expect_without_storage(a, this->dev());  // NOLINT(bugprone-use-after-move): the moved-from contract
    EXPECT_EQ(b.label(), "source");
    EXPECT_EQ(b.shape(), (shape{n, 1}));
    expect_values(b, values, s);
    // Assigning to it makes it usable again.
    a = b.clone();
    expect_values(a, values, s);
    EXPECT_FALSE(a.shares_storage_with(b));
    // A self-move changes nothing.
    tensor& same = b;
    b = std::move(same);
    expect_values(b, values, s);
  }
}

// ---- blob -----------------------------------------------------------------------------

// Every public call on a float32 blob left without storage by a move: the
// answers of `blob{dtype::float32}`, or an error that says so.
void expect_without_storage(blob& b, device_id dev) {
  const blob& c = b;
  EXPECT_EQ(b.dtype(), dtype::float32);
  EXPECT_EQ(b.shape(), shape{});
  EXPECT_EQ(b.num_axes(), 0);
  EXPECT_EQ(b.count(), 0);
  EXPECT_EQ(b.count(0), 0);
  EXPECT_EQ(b.count(0, 0), 0);
  EXPECT_THAT(error_of([&] { (void)b.count(0, 1); }), HasSubstr("count(0, 1)"));
  EXPECT_EQ(b.capacity(), 0);
  EXPECT_EQ(b.shape_string(), "(0)");
  EXPECT_THAT(error_of([&] { (void)b.shape(0); }), HasSubstr("axis 0"));
  EXPECT_THAT(error_of([&] { (void)b.canonical_axis_index(0); }), HasSubstr("axis 0"));
  // Caffe's legacy accessors: 1 for each axis a blob lacks.
  EXPECT_EQ(b.legacy_shape(0), 1);
  EXPECT_EQ(b.num(), 1);
  EXPECT_EQ(b.channels(), 1);
  EXPECT_EQ(b.height(), 1);
  EXPECT_EQ(b.width(), 1);
  EXPECT_EQ(b.offset(0), 0);
  EXPECT_EQ(b.offset(std::span<const std::int64_t>{}), 0);
  EXPECT_THAT(error_of([&] { (void)b.offset(std::vector<std::int64_t>{0}); }), HasSubstr("offset of 1 indices"));
  EXPECT_THAT(error_of([&] { (void)b.device(); }), HasSubstr("without storage"));
  EXPECT_FALSE(b.data().has_storage());
  EXPECT_FALSE(b.diff().has_storage());
  EXPECT_EQ(b.data().count(), 0);
  EXPECT_EQ(b.diff().count(), 0);
  EXPECT_EQ(b.to_string(), "blob: data tensor float32 () without storage; diff tensor float32 () without storage");
  std::ostringstream printed;
  printed << b;
  EXPECT_EQ(printed.str(), b.to_string());

  stream s{dev};
  EXPECT_EQ(c.host_data<float>(), nullptr);
  EXPECT_EQ(b.mutable_host_data<float>(), nullptr);
  EXPECT_EQ(c.device_data<float>(s), nullptr);
  EXPECT_EQ(c.device_data<float>(), nullptr);
  EXPECT_EQ(b.mutable_device_data<float>(s), nullptr);
  EXPECT_EQ(b.mutable_device_data<float>(), nullptr);
  EXPECT_EQ(c.host_diff<float>(), nullptr);
  EXPECT_EQ(b.mutable_host_diff<float>(), nullptr);
  EXPECT_EQ(c.device_diff<float>(s), nullptr);
  EXPECT_EQ(c.device_diff<float>(), nullptr);
  EXPECT_EQ(b.mutable_device_diff<float>(s), nullptr);
  EXPECT_EQ(b.mutable_device_diff<float>(), nullptr);
  EXPECT_THAT(error_of([&] { (void)c.host_diff<double>(); }),
              HasSubstr("blob float32 () without storage: host_diff<float64>() asks for float64 elements"));

  EXPECT_EQ(c.asum_data(), 0);
  EXPECT_EQ(c.asum_data(s), 0);
  EXPECT_EQ(c.asum_diff(), 0);
  EXPECT_EQ(c.asum_diff(s), 0);
  EXPECT_EQ(c.sumsq_data(), 0);
  EXPECT_EQ(c.sumsq_data(s), 0);
  EXPECT_EQ(c.sumsq_diff(), 0);
  EXPECT_EQ(c.sumsq_diff(s), 0);
  b.update();
  b.update(s);
  b.scale_data(2);
  b.scale_data(2, s);
  b.scale_diff(2);
  b.scale_diff(2, s);
  c.prefetch_to_device(s);
  c.prefetch_to_host(s);
  c.synchronize();
  const blob* list[] = {&b};
  prefetch_to_device(list, s);
  prefetch_to_host(list, s);
  synchronize(list);

  blob empty{dtype::float32};
  b.share_data(empty);
  b.share_diff(empty);
  b.copy_from(empty);
  b.copy_from(empty, true);
  const blob four{{4}, dev};
  EXPECT_THAT(error_of([&] { b.share_data(four); }), HasSubstr("count and dtype must match"));
  EXPECT_THAT(error_of([&] { b.share_diff(four); }), HasSubstr("count and dtype must match"));
  EXPECT_THAT(error_of([&] { b.copy_from(four); }), HasSubstr("pass reshape_to_fit = true"));
  EXPECT_THAT(error_of([&] { b.copy_from(blob{dtype::float64}); }), HasSubstr("copy_from a blob of dtype float64"));
  // None of these gave it storage.
  EXPECT_FALSE(b.data().has_storage());
  EXPECT_EQ(b.count(), 0);
}

// Fresh random data and diff, written on the host or the device; returned.
std::pair<std::vector<float>, std::vector<float>> write_random(blob& b, bool on_device, stream_view s) {
  tensor data = b.data();  // a view: writes through it are the blob's
  tensor diff = b.diff();
  return {write_random(data, on_device, s), write_random(diff, !on_device, s)};
}

void expect_values(const blob& b, const std::pair<std::vector<float>, std::vector<float>>& values, stream_view s) {
  expect_values(b.data(), values.first, s);
  expect_values(b.diff(), values.second, s);
  double asum = 0;
  for (const float v : values.first) asum += std::abs(static_cast<double>(v));
  EXPECT_NEAR(b.asum_data(), asum, 1e-9 * asum);
}

TYPED_TEST(MovedFrom, ABlobIsABlobWithoutStorage) {
  const device_guard on{this->dev()};  // reshape gives storage on the current device
  for (const bool on_device : {false, true}) {
    stream s{this->dev()};
    const std::int64_t n = 1 + static_cast<std::int64_t>(test::rng()() % 40);
    blob a{{n, 2, 3}, this->dev(), dtype::float32, {.label = "conv"}};
    const auto values = write_random(a, on_device, s);
    blob b = std::move(a);
    expect_without_storage(a, this->dev());  // NOLINT(bugprone-use-after-move): the moved-from contract
    EXPECT_EQ(b.data().label(), "conv");
    EXPECT_EQ(b.diff().label(), "conv.diff");
    EXPECT_EQ(b.shape(), (shape{n, 2, 3}));
    EXPECT_EQ(b.device(), this->dev());
    expect_values(b, values, s);
    // copy_from with reshape_to_fit gives the moved-from blob storage again.
    a.copy_from(b, false, true);
    EXPECT_EQ(a.shape(), b.shape());
    expect_values(a.data(), values.first, s);
    // So do reshape_like and Caffe's four-extent reshape.
    blob c = std::move(a);
    a.reshape_like(b);  // NOLINT(bugprone-use-after-move): the moved-from contract
    EXPECT_EQ(a.shape(), b.shape());
    EXPECT_EQ(a.diff().shape(), b.shape());
    blob d = std::move(c);
    c.reshape(2, 3, 4, 5);  // NOLINT(bugprone-use-after-move): the moved-from contract
    EXPECT_EQ(c.count(), 120);
    EXPECT_EQ(c.diff().count(), 120);
    expect_values(d.data(), values.first, s);
  }
}

TYPED_TEST(MovedFrom, AMoveAssignedBlobIsABlobWithoutStorage) {
  for (const bool on_device : {false, true}) {
    stream s{this->dev()};
    const std::int64_t n = 1 + static_cast<std::int64_t>(test::rng()() % 40);
    blob a{{n, 5}, this->dev(), dtype::float32, {.label = "fc"}};
    const auto values = write_random(a, on_device, s);
    blob b{{3}, this->dev(), dtype::float32, {.label = "target"}};
    (void)write_random(b, !on_device, s);
    const std::weak_ptr<synced_memory> old_data = b.data().storage();
    b = std::move(a);
    EXPECT_TRUE(old_data.expired());         // the target's storage was released, not leaked
    expect_without_storage(a, this->dev());  // NOLINT(bugprone-use-after-move): the moved-from contract
    EXPECT_EQ(b.data().label(), "fc");
    EXPECT_EQ(b.shape(), (shape{n, 5}));
    expect_values(b, values, s);
    // reshape gives the moved-from blob storage again.
    a.reshape({2, 2});
    EXPECT_EQ(a.count(), 4);
    EXPECT_EQ(a.device(), current_device());
  }
}

}  // namespace
}  // namespace syncmem
