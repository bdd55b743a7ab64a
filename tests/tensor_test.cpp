// ctest-labels: threaded
// tensor: construction, typed access, views, capacity-reusing reshape (and
// how it treats a shared storage), copies between host and devices, fill,
// and the errors bad arguments give. Typed over device kinds: emulated here,
// CUDA on a GPU machine.
#include "syncmem/tensor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {

void PrintTo(sync_state state, std::ostream* os) { *os << to_string(state); }

namespace {

using test::read_device;

std::vector<std::uint8_t> pattern(std::uint64_t seed, std::size_t n, std::size_t from = 0) {
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = test::pattern_byte(seed, from + i);
  return out;
}

std::vector<std::uint8_t> host_bytes(const tensor& t) {
  const auto* p = static_cast<const std::uint8_t*>(t.host_data());
  return p == nullptr ? std::vector<std::uint8_t>{} : std::vector<std::uint8_t>{p, p + t.nbytes()};
}

void write_host(tensor& t, const std::vector<std::uint8_t>& bytes) {
  ASSERT_EQ(bytes.size(), t.nbytes());
  if (!bytes.empty()) std::memcpy(t.mutable_host_data(), bytes.data(), bytes.size());
}

// Writes a random pattern on the device side, in order on s; returns it.
std::vector<std::uint8_t> write_device(tensor& t, stream_view s) {
  const auto seed = test::fresh_seed();
  test::device_fill_pattern(s, t.mutable_device_data(s), t.nbytes(), seed);
  return pattern(seed, t.nbytes());
}

template <class F>
void for_each_element_type(F&& f) {
  f.template operator()<bool>();
  f.template operator()<std::int8_t>();
  f.template operator()<std::uint8_t>();
  f.template operator()<std::int16_t>();
  f.template operator()<std::int32_t>();
  f.template operator()<std::int64_t>();
  f.template operator()<float16>();
  f.template operator()<bfloat16>();
  f.template operator()<float>();
  f.template operator()<double>();
}

template <class T>
T value_for(std::int64_t i) {
  if constexpr (std::is_same_v<T, bool>) {
    return i % 3 == 1;
  } else if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    return T{static_cast<float>(i) * 0.5F - 3.0F};
  } else {
    return static_cast<T>(i * 3 - 7);
  }
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

using test::error_of;

template <class Kind>
class Tensor : public test::device_test<Kind> {};
TYPED_TEST_SUITE(Tensor, test::device_kinds, test::device_kind_names);

// ---- construction and description ------------------------------------------------

TYPED_TEST(Tensor, ConstructionIsLazyAndDescribesItself) {
  tensor t{dtype::float32, {2, 3, 4}, this->dev(), {.label = "activations"}};
  EXPECT_EQ(t.dtype(), dtype::float32);
  EXPECT_EQ(t.shape(), (shape{2, 3, 4}));
  EXPECT_EQ(t.num_axes(), 3);
  EXPECT_EQ(t.count(), 24);
  EXPECT_EQ(t.itemsize(), 4U);
  EXPECT_EQ(t.nbytes(), 96U);
  EXPECT_EQ(t.capacity(), 24);
  EXPECT_EQ(t.reallocations(), 0U);
  EXPECT_EQ(t.storage_offset(), 0U);
  EXPECT_EQ(t.device(), this->dev());
  EXPECT_EQ(t.label(), "activations");
  EXPECT_EQ(t.state(), sync_state::uninitialized);
  EXPECT_FALSE(t.storage()->has_host_memory());
  EXPECT_FALSE(t.storage()->has_device_memory());
  EXPECT_EQ(t.to_string(), "tensor 'activations' float32 (2, 3, 4) on " + to_string(this->dev()) + ", uninitialized");
  EXPECT_EQ(host_bytes(t), std::vector<std::uint8_t>(96, 0));  // zero-filled on first use
  EXPECT_EQ(t.state(), sync_state::at_host);
}

TYPED_TEST(Tensor, DefaultTensorHasNoStorageUntilReshaped) {
  tensor t;
  EXPECT_FALSE(t.has_storage());
  EXPECT_EQ(t.count(), 0);
  EXPECT_EQ(t.num_axes(), 0);
  EXPECT_EQ(t.capacity(), 0);
  EXPECT_EQ(t.host_data(), nullptr);
  EXPECT_EQ(t.mutable_device_data(), nullptr);
  EXPECT_EQ(t.state(), sync_state::uninitialized);
  EXPECT_EQ(t.label(), "");
  EXPECT_EQ(t.to_string(), "tensor float32 () without storage");
  EXPECT_THAT(error_of([&] { (void)t.device(); }), HasSubstr("a tensor without storage has no device"));
  EXPECT_THAT(error_of([&] { (void)t.view(shape{1}); }), HasSubstr("without storage"));
  t.zero();      // nothing to do
  t.fill(1.0F);  // nothing to do
  EXPECT_EQ(t.clone().has_storage(), false);

  tensor d{dtype::int16};
  {
    device_guard guard{this->dev()};
    d.reshape({4, 5});
  }
  EXPECT_TRUE(d.has_storage());
  EXPECT_EQ(d.device(), this->dev());
  EXPECT_EQ(d.count(), 20);
  EXPECT_EQ(d.reallocations(), 1U);
  EXPECT_EQ(d.host_data<std::int16_t>()[19], 0);
}

TYPED_TEST(Tensor, WrapsAnExistingStorage) {
  auto storage = std::make_shared<synced_memory>(64, this->dev(), synced_memory_options{.label = "arena"});
  tensor a{dtype::int32, {4}, storage, 16};
  EXPECT_EQ(a.storage_offset(), 16U);
  EXPECT_EQ(a.capacity(), 12);  // (64 - 16) / 4
  EXPECT_EQ(a.label(), "arena");
  EXPECT_THAT(error_of([&] {
                tensor bad{dtype::int32, {4}, storage, 2};
              }),
              HasSubstr("storage offset 2 is not a multiple of the element size 4"));
  EXPECT_THAT(error_of([&] {
                tensor bad{dtype::int32, {13}, storage, 16};
              }),
              HasSubstr("bytes [16, 68) do not fit in storage 'arena' of 64 bytes"));
  EXPECT_THAT(error_of([&] {
                tensor bad{dtype::int32, {1}, std::shared_ptr<synced_memory>{}};
              }),
              HasSubstr("the storage is null"));
}

// ---- typed access ---------------------------------------------------------------------

TYPED_TEST(Tensor, TypedAccessChecksTheDtypeAndNamesBothTypes) {
  tensor t{dtype::float32, {8}, this->dev(), {.label = "logits"}};
  const std::string wrong = error_of([&] { (void)t.host_data<std::int32_t>(); });
  EXPECT_THAT(wrong, HasSubstr("tensor 'logits' float32 (8)"));
  EXPECT_THAT(wrong, HasSubstr("host_data<int32>() asks for int32 elements, but the tensor's dtype is float32"));
  EXPECT_THAT(error_of([&] { (void)t.mutable_host_data<double>(); }), HasSubstr("mutable_host_data<float64>()"));
  EXPECT_THAT(error_of([&] { (void)t.device_data<float16>(); }), HasSubstr("device_data<float16>()"));
  stream s{this->dev()};
  EXPECT_THAT(error_of([&] { (void)t.mutable_device_data<bfloat16>(s); }),
              HasSubstr("mutable_device_data<bfloat16>()"));
  EXPECT_THAT(error_of([&] { t.fill(1e39); }), HasSubstr("fill(1e+39) cannot be represented in float32"));
  EXPECT_EQ(t.state(), sync_state::uninitialized);  // nothing was touched
  EXPECT_FALSE(t.storage()->has_host_memory());
  EXPECT_NE(t.host_data<float>(), nullptr);
}

TYPED_TEST(Tensor, TypedAccessRoundTripsEveryDtypeThroughTheDevice) {
  for_each_element_type([&]<class T>() {
    const std::int64_t n = 37;
    tensor t{dtype_of<T>(), {n}, this->dev()};
    T* h = t.mutable_host_data<T>();
    for (std::int64_t i = 0; i < n; ++i) h[i] = value_for<T>(i);
    stream s{this->dev()};
    const T* d = t.device_data<T>(s);
    const auto on_device = read_device(s, d, t.nbytes());
    EXPECT_EQ(std::memcmp(on_device.data(), t.host_data<T>(), t.nbytes()), 0) << to_string(dtype_of<T>());
    // The device rewrites it; the host sees the device's bytes.
    const auto written = write_device(t, s);
    EXPECT_EQ(host_bytes(t), written) << to_string(dtype_of<T>());
    EXPECT_EQ(t.state(), sync_state::synced);
  });
}

// ---- views ----------------------------------------------------------------------------

TYPED_TEST(Tensor, SlicesAndViewsShareStorage) {
  tensor t{dtype::int32, {6, 4}, this->dev(), {.label = "rows"}};
  auto* p = t.mutable_host_data<std::int32_t>();
  for (int i = 0; i < 24; ++i) p[i] = i;

  tensor s = t.slice(2, 5);
  EXPECT_EQ(s.shape(), (shape{3, 4}));
  EXPECT_EQ(s.storage_offset(), 32U);
  EXPECT_TRUE(s.shares_storage_with(t));
  EXPECT_EQ(s.host_data<std::int32_t>()[0], 8);
  EXPECT_EQ(s.to_string(), "tensor 'rows' int32 (3, 4) on " + to_string(this->dev()) +
                               ", at_host, bytes [32, 80) of a storage of 96, capacity 16");
  s.mutable_host_data<std::int32_t>()[1] = -1;
  EXPECT_EQ(t.host_data<std::int32_t>()[9], -1);

  // A device write through the slice lands in the parent's rows 2..4 only.
  stream st{this->dev()};
  const auto seed = test::fresh_seed();
  test::device_fill_pattern(st, s.mutable_device_data(st), s.nbytes(), seed);
  EXPECT_EQ(t.state(), sync_state::at_device);
  const auto all = host_bytes(t);
  EXPECT_EQ(std::vector<std::uint8_t>(all.begin() + 32, all.begin() + 80), pattern(seed, 48));
  std::vector<std::int32_t> head(8);
  std::memcpy(head.data(), all.data(), 32);
  EXPECT_EQ(head, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));

  tensor v = t.view({4, 6});
  EXPECT_TRUE(v.shares_storage_with(t));
  EXPECT_EQ(host_bytes(v), host_bytes(t));
  EXPECT_EQ(t.slice(0, 0).count(), 0);
  EXPECT_EQ(t.slice(6, 6).count(), 0);
  // A count-0 slice gives null from every accessor and touches no storage.
  tensor none = t.slice(3, 3);
  const auto state_before = t.state();
  EXPECT_EQ(none.host_data(), nullptr);
  EXPECT_EQ(none.mutable_host_data(), nullptr);
  EXPECT_EQ(none.device_data(st), nullptr);
  EXPECT_EQ(none.mutable_device_data(st), nullptr);
  EXPECT_EQ(t.state(), state_before);
  EXPECT_EQ(s.slice(1, 2).storage_offset(), 48U);  // a slice of a slice

  EXPECT_THAT(error_of([&] {
                (void)t.view({5, 5});
              }),
              HasSubstr("view(5, 5) has 25 elements; a view must keep the count of 24"));
  EXPECT_THAT(error_of([&] { (void)t.slice(4, 7); }),
              HasSubstr("slice(4, 7) is out of range: it needs 0 <= begin <= end <= 6"));
  EXPECT_THAT(error_of([&] { (void)t.slice(3, 2); }), HasSubstr("slice(3, 2) is out of range"));
  EXPECT_THAT(error_of([&] { (void)t.slice(-1, 2); }), HasSubstr("slice(-1, 2) is out of range"));
  tensor scalar{dtype::float64, {}, this->dev()};
  EXPECT_EQ(scalar.count(), 1);
  EXPECT_THAT(error_of([&] { (void)scalar.slice(0, 1); }), HasSubstr("needs a first axis; the tensor has none"));
}

// ---- reshape ----------------------------------------------------------------------------

// Caffe's "reshape keeps the data pointer within capacity".
TYPED_TEST(Tensor, ReshapeWithinCapacityKeepsThePointersAndAllocatesNothing) {
  tensor t{dtype::float32, {10, 10}, this->dev()};
  stream s{this->dev()};
  const void* host = t.mutable_host_data();
  const void* device = t.device_data(s);
  for (const shape& next : {shape{5, 5}, shape{10, 10}, shape{2, 50}, shape{100}, shape{1, 1, 1}, shape{0}}) {
    t.reshape(next);
    EXPECT_EQ(t.shape(), next);
    EXPECT_EQ(t.capacity(), 100);
    EXPECT_EQ(t.reallocations(), 0U);
    if (next.count() > 0) {
      EXPECT_EQ(t.device_data(s), device);
      EXPECT_EQ(t.mutable_host_data(), host);
    }
  }
  t.reshape({11, 10});
  EXPECT_EQ(t.reallocations(), 1U);
  EXPECT_EQ(t.capacity(), 110);
  EXPECT_EQ(t.storage()->reallocations(), 1U);
}

TYPED_TEST(Tensor, ReshapeKeepsTheFirstElementsAndZeroesTheRest) {
  tensor t{dtype::int32, {8}, this->dev()};
  for (int i = 0; i < 8; ++i) t.mutable_host_data<std::int32_t>()[i] = i + 1;
  t.reshape({3});
  // Growing back within capacity: the storage was the tensor's alone, so it shrank and the tail reads as zeros.
  t.reshape({2, 3});
  std::vector<std::int32_t> got(t.host_data<std::int32_t>(), t.host_data<std::int32_t>() + 6);
  EXPECT_EQ(got, (std::vector<std::int32_t>{1, 2, 3, 0, 0, 0}));
  // Past capacity, from the device side: the contents move, the new tail is zero.
  stream s{this->dev()};
  const auto written = write_device(t, s);
  t.reshape({5, 4});
  EXPECT_EQ(t.reallocations(), 1U);
  auto bytes = host_bytes(t);
  EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + 24), written);
  EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin() + 24, bytes.end()), std::vector<std::uint8_t>(56, 0));
  // Discard drops the contents (zeros when next used).
  t.reshape({5, 4}, resize_mode::discard);
  EXPECT_EQ(t.state(), sync_state::uninitialized);
  EXPECT_EQ(host_bytes(t), std::vector<std::uint8_t>(80, 0));
}

TYPED_TEST(Tensor, ReshapeChurnAllocatesNothingOnceAtTheLargestSize) {
  tensor t{dtype::float32, {1}, this->dev()};
  stream s{this->dev()};
  std::uniform_int_distribution<std::int64_t> batch{1, 64};
  t.reshape({64, 128});  // the largest shape the loop can ask for
  (void)t.mutable_device_data(s);
  const auto after_warmup = t.reallocations();
  const void* device = t.device_data(s);
  for (int i = 0; i < 500; ++i) {
    t.reshape({batch(test::rng()), 128});
    EXPECT_EQ(t.mutable_device_data(s), device);
  }
  EXPECT_EQ(t.reallocations(), after_warmup);
  EXPECT_EQ(t.storage()->reallocations(), 1U);  // only the warm-up grew it
}

TYPED_TEST(Tensor, ReshapeOfASharedStorageDetachesOnlyPastCapacity) {
  tensor t{dtype::int32, {8}, this->dev(), {.label = "shared"}};
  for (int i = 0; i < 8; ++i) t.mutable_host_data<std::int32_t>()[i] = 10 + i;
  const tensor v = t.view({2, 4});
  const auto original = host_bytes(v);

  // Within capacity: never shrinks what the view sees.
  t.reshape({4});
  EXPECT_TRUE(t.shares_storage_with(v));
  EXPECT_EQ(t.storage()->size(), 32U);
  EXPECT_EQ(host_bytes(v), original);
  t.reshape({8});
  EXPECT_EQ(host_bytes(t), original);  // nothing was zeroed: the view still holds those bytes
  EXPECT_EQ(t.reallocations(), 0U);

  // Past capacity: the tensor detaches with its contents; the view keeps the old storage.
  t.reshape({4, 4});
  EXPECT_FALSE(t.shares_storage_with(v));
  EXPECT_EQ(t.reallocations(), 1U);
  EXPECT_EQ(t.label(), "shared");
  const auto grown = host_bytes(t);
  EXPECT_EQ(std::vector<std::uint8_t>(grown.begin(), grown.begin() + 32), original);
  EXPECT_EQ(std::vector<std::uint8_t>(grown.begin() + 32, grown.end()), std::vector<std::uint8_t>(32, 0));
  t.mutable_host_data<std::int32_t>()[0] = -5;
  EXPECT_EQ(host_bytes(v), original);
  EXPECT_EQ(v.storage().use_count(), 1);

  // A slice of a larger storage grows into the storage's capacity, but no further.
  tensor big{dtype::int32, {10, 2}, this->dev()};
  tensor tail = big.slice(8, 10);  // elements 16..19
  EXPECT_EQ(tail.capacity(), 4);
  tail.reshape({4});
  EXPECT_TRUE(tail.shares_storage_with(big));
  tail.reshape({5});
  EXPECT_FALSE(tail.shares_storage_with(big));
  EXPECT_EQ(tail.storage_offset(), 0U);
}

TYPED_TEST(Tensor, ReshapeRefusesWhatCannotBeHeldAndChangesNothing) {
  tensor t{dtype::float32, {3}, this->dev()};
  t.fill(2.5F);
  const std::string e = error_of([&] { t.reshape({std::int64_t{1} << 40, std::int64_t{1} << 22}); });
  EXPECT_THAT(e, HasSubstr("4611686018427387904 elements of 4 bytes exceed the largest buffer"));
  EXPECT_EQ(t.shape(), shape{3});
  EXPECT_EQ(t.host_data<float>()[2], 2.5F);
  EXPECT_THAT(error_of([&] {
                tensor huge{dtype::float64, {std::int64_t{1} << 60}, this->dev()};
              }),
              HasSubstr("exceed the largest buffer"));
}

// ---- copies ---------------------------------------------------------------------------

TYPED_TEST(Tensor, CopyFromGoesBetweenTheNewestSides) {
  const shape s{3, 5, 7};
  stream st{this->dev()};
  const auto data = test::random_bytes(3 * 5 * 7 * 8);

  tensor host_src{dtype::float64, s, this->dev()};
  write_host(host_src, data);

  tensor a{dtype::float64, s, this->dev()};  // uninitialized: takes the source's side (host)
  a.copy_from(host_src);
  EXPECT_EQ(a.state(), sync_state::at_host);
  EXPECT_EQ(host_bytes(a), data);

  tensor b{dtype::float64, s, this->dev()};
  (void)b.mutable_device_data(st);  // device side newest: host -> device
  b.copy_from(host_src, st);
  EXPECT_EQ(b.state(), sync_state::at_device);
  EXPECT_EQ(read_device(st, b.device_data(st), b.nbytes()), data);

  tensor c{dtype::float64, s, this->dev()};
  (void)c.mutable_device_data(st);
  c.copy_from(b, st);  // device -> device, ordered on st
  EXPECT_EQ(c.state(), sync_state::at_device);
  EXPECT_EQ(host_bytes(c), data);

  tensor d{dtype::float64, s, this->dev()};
  (void)d.mutable_host_data();
  d.copy_from(b);  // device -> host
  EXPECT_EQ(d.state(), sync_state::at_host);
  EXPECT_EQ(host_bytes(d), data);
  EXPECT_EQ(b.state(), sync_state::at_device);  // the source was only read
}

TYPED_TEST(Tensor, CopyFromIsOrderedAfterPendingDeviceWork) {
  test::scoped_emulated_delay delay{std::chrono::microseconds{100}};
  const std::size_t n = 1 << 14;
  stream a{this->dev()};
  stream b{this->dev()};
  tensor src{dtype::uint8, {static_cast<std::int64_t>(n)}, this->dev()};
  test::device_sleep(a, std::chrono::milliseconds{30});
  const auto written = write_device(src, a);  // still pending behind the sleep
  tensor dst{dtype::uint8, src.shape(), this->dev()};
  (void)dst.mutable_device_data(b);
  dst.copy_from(src, b);  // b waits for a's write
  test::device_add_bytes(b, dst.mutable_device_data(b), n, 3);
  auto expected = written;
  for (auto& byte : expected) byte = static_cast<std::uint8_t>(byte + 3);
  EXPECT_EQ(host_bytes(dst), expected);
  EXPECT_EQ(host_bytes(src), written);
}

TYPED_TEST(Tensor, CopyFromAcrossDevices) {
  SYNCMEM_REQUIRE_COUNT(2);
  const shape s{17, 33};
  stream s0{this->dev(0)};
  stream s1{this->dev(1)};
  tensor src{dtype::int16, s, this->dev(0), {.label = "on-0"}};
  test::device_sleep(s0, std::chrono::milliseconds{20});
  const auto written = write_device(src, s0);

  tensor to_device{dtype::int16, s, this->dev(1)};
  (void)to_device.mutable_device_data(s1);
  to_device.copy_from(src, s1);
  EXPECT_EQ(read_device(s1, to_device.device_data(s1), to_device.nbytes()), written);

  tensor to_host{dtype::int16, s, this->dev(1)};
  (void)to_host.mutable_host_data();
  to_host.copy_from(src);
  EXPECT_EQ(to_host.state(), sync_state::at_host);
  EXPECT_EQ(host_bytes(to_host), written);

  const tensor moved = src.clone(this->dev(1));
  EXPECT_EQ(moved.device(), this->dev(1));
  EXPECT_EQ(moved.label(), "on-0");
  EXPECT_EQ(host_bytes(moved), written);
  if (this->count() >= 3) {
    // And back, through a third device.
    tensor third = moved.clone(this->dev(2));
    (void)third.mutable_device_data();
    src.zero(s0);
    src.copy_from(third, s0);
    EXPECT_EQ(host_bytes(src), written);
  }
}

// Between two devices, directly (peer access) and staged through pinned host
// memory: the copy waits for the source's pending write on another stream,
// and the destination's stream sees the copy's result after it.
TYPED_TEST(Tensor, CopyFromAcrossDevicesWaitsForTheSourcesStreamWithAndWithoutPeerAccess) {
  SYNCMEM_REQUIRE_COUNT(2);
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  const copy_options before = get_copy_options();
  for (const bool peer : {true, false}) {
    SCOPED_TRACE(peer ? "peer access" : "staged");
    copy_options o = before;
    o.peer_access = peer;
    o.min_chunk = o.max_chunk = 64 << 10;  // several chunks in flight when staged
    set_copy_options(o);
    stream a{this->dev(0)};
    stream b{this->dev(1)};
    tensor src{dtype::float32, shape{333, 257}, this->dev(0)};
    tensor dst{dtype::float32, shape{333, 257}, this->dev(1)};
    (void)dst.mutable_device_data(b);
    std::vector<std::uint8_t> written;
    {
      test::stream_latch hold{a};
      written = write_device(src, a);  // queued behind the latch
      const auto got = test::while_held(hold, [&] {
        dst.copy_from(src, b);
        test::device_add_bytes(b, dst.mutable_device_data(b), dst.nbytes(), 1);  // after the copy, on b
        return test::read_device(b, dst.device_data(b), dst.nbytes());
      });
      auto expected = written;
      for (auto& byte : expected) byte = static_cast<std::uint8_t>(byte + 1);
      EXPECT_EQ(got, expected);
    }
    EXPECT_EQ(host_bytes(src), written);
  }
  set_copy_options(before);
}

TEST(TensorMixedKinds, CopiesBetweenACudaAndAnEmulatedDevice) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 1);
  // Slow emulated streams: the destination's zero fill, pending on its own
  // stream, must still come before the copy that the source's stream drives.
  const test::scoped_emulated_delay delay{std::chrono::microseconds{2000}};
  const shape s{1000};
  tensor gpu{dtype::float32, s, device_id::cuda(0)};
  stream cs{device_id::cuda(0)};
  const auto written = write_device(gpu, cs);
  tensor emu{dtype::float32, s, device_id::emulated(0)};
  (void)emu.mutable_device_data();
  emu.copy_from(gpu);  // CUDA device -> emulated device
  EXPECT_EQ(host_bytes(emu), written);
  gpu.zero(cs);
  (void)emu.mutable_device_data();
  gpu.copy_from(emu, cs);  // emulated device -> CUDA device
  EXPECT_EQ(host_bytes(gpu), written);
}

TYPED_TEST(Tensor, CopyFromRefusesMismatchesAndChangesNothing) {
  tensor dst{dtype::float32, {4, 4}, this->dev(), {.label = "dst"}};
  dst.fill(1.0F);
  const auto before = host_bytes(dst);
  tensor other_type{dtype::int32, {4, 4}, this->dev()};
  tensor other_shape{dtype::float32, {16}, this->dev()};
  EXPECT_THAT(error_of([&] { dst.copy_from(other_type); }),
              HasSubstr("copy_from needs a source of the same dtype and shape; the source is tensor 'unlabelled' "
                        "int32 (4, 4)"));
  EXPECT_THAT(error_of([&] { dst.copy_from(other_shape); }), HasSubstr("float32 (16)"));
  tensor whole{dtype::float32, {6, 2}, this->dev()};
  tensor first = whole.slice(0, 4);
  tensor last = whole.slice(2, 6);
  EXPECT_THAT(error_of([&] { first.copy_from(last); }),
              HasSubstr("copy_from a view that overlaps it (bytes [16, 48) into [0, 32) of one storage)"));
  if (this->count() >= 2) {
    stream elsewhere{this->dev(1)};
    EXPECT_THAT(error_of([&] {
                  dst.copy_from(other_shape.view({4, 4}), elsewhere);
                }),
                HasSubstr("copy_from was given a stream of " + to_string(this->dev(1))));
  }
  EXPECT_EQ(host_bytes(dst), before);
  // Disjoint views of one storage copy fine, and a tensor copies onto itself as a no-op.
  whole.fill(0.0F);
  auto* w = whole.mutable_host_data<float>();
  for (int i = 0; i < 4; ++i) w[i] = static_cast<float>(i + 1);
  whole.slice(4, 6).copy_from(whole.slice(0, 2));
  EXPECT_EQ(whole.host_data<float>()[8], 1.0F);
  EXPECT_EQ(whole.host_data<float>()[11], 4.0F);
  dst.copy_from(dst);
  EXPECT_EQ(host_bytes(dst), before);
}

TYPED_TEST(Tensor, CloneIsADeepCopy) {
  tensor t{dtype::uint8, {100}, this->dev(), {.label = "orig", .host_kind = host_memory_kind::pageable}};
  const auto data = test::random_bytes(100);
  write_host(t, data);
  tensor c = t.clone();
  EXPECT_FALSE(c.shares_storage_with(t));
  EXPECT_EQ(c.label(), "orig");
  EXPECT_EQ(c.storage()->options().host_kind, host_memory_kind::pageable);
  EXPECT_EQ(host_bytes(c), data);
  c.mutable_host_data<std::uint8_t>()[0] ^= 0xFF;
  EXPECT_EQ(host_bytes(t), data);
}

// ---- fill and zero -------------------------------------------------------------------------

TYPED_TEST(Tensor, FillSetsEveryElementOnTheHostOrTheDevice) {
  for_each_element_type([&]<class T>() {
    const T value = value_for<T>(4);  // nonzero for every type
    const std::int64_t n = 1000 + static_cast<std::int64_t>(test::rng()() % 1000);
    tensor on_host{dtype_of<T>(), {n}, this->dev()};
    on_host.fill(value);
    EXPECT_EQ(on_host.state(), sync_state::at_host);
    tensor on_device{dtype_of<T>(), {n}, this->dev()};
    stream s{this->dev()};
    test::device_sleep(s, std::chrono::milliseconds{5});
    on_device.fill(value, s);  // ordered after the sleep
    EXPECT_EQ(on_device.state(), sync_state::at_device);
    for (const tensor* t : {&on_host, &on_device}) {
      const T* p = t->host_data<T>();
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < n; ++i) wrong += same_bits(p[i], value) ? 0 : 1;
      EXPECT_EQ(wrong, 0) << to_string(dtype_of<T>()) << " " << t->to_string();
    }
    on_device.zero();  // the device side is newest: zeroed there
    EXPECT_EQ(on_device.state(), sync_state::at_device);
    EXPECT_EQ(host_bytes(on_device), std::vector<std::uint8_t>(on_device.nbytes(), 0));
  });
}

// PyTorch's fill_: the value is converted to the dtype; only a value the dtype
// cannot hold is refused, and then nothing is written.
TYPED_TEST(Tensor, FillConvertsTheValueToTheDtype) {
  const std::int64_t n = 100 + static_cast<std::int64_t>(test::rng()() % 100);
  stream s{this->dev()};
  auto expect_all = [&]<class T>(const tensor& t, T expected) {
    std::int64_t wrong = 0;
    for (const T& v : t.host_span<T>()) wrong += same_bits(v, expected) ? 0 : 1;
    EXPECT_EQ(wrong, 0) << t.to_string();
  };
  tensor f{dtype::float32, {n}, this->dev(), {.label = "f"}};
  f.fill(1);
  expect_all(f, 1.0F);
  f.fill(3, s);
  expect_all(f, 3.0F);
  f.fill(0.1);  // rounds to the nearest float
  expect_all(f, 0.1F);
  f.fill(std::numeric_limits<double>::infinity());
  expect_all(f, std::numeric_limits<float>::infinity());
  tensor i{dtype::int32, {n}, this->dev(), {.label = "i"}};
  i.fill(7.0);
  expect_all(i, std::int32_t{7});
  i.fill(std::uint64_t{2147483647}, s);
  expect_all(i, std::int32_t{2147483647});
  tensor h{dtype::float16, {n}, this->dev()};
  h.fill(2);
  expect_all(h, float16{2.0F});
  tensor b{dtype::bool_, {n}, this->dev()};
  b.fill(1);
  expect_all(b, true);
  tensor l{dtype::int64, {n}, this->dev()};
  l.fill(std::numeric_limits<std::int64_t>::min());
  expect_all(l, std::numeric_limits<std::int64_t>::min());
  tensor d{dtype::float64, {n}, this->dev()};
  d.fill(std::numeric_limits<std::uint64_t>::max());
  expect_all(d, 18446744073709551615.0);

  tensor u{dtype::uint8, {n}, this->dev(), {.label = "bytes"}};
  EXPECT_THAT(error_of([&] { u.fill(-1); }), HasSubstr("tensor 'bytes' uint8 (" + std::to_string(n) + ")"));
  EXPECT_THAT(error_of([&] { u.fill(-1); }),
              HasSubstr("fill(-1) cannot be represented in uint8: it lies outside [0, 255]"));
  EXPECT_THAT(error_of([&] { u.fill(256, s); }), HasSubstr("fill(256) cannot be represented in uint8"));
  EXPECT_EQ(u.state(), sync_state::uninitialized);  // nothing was written
  EXPECT_THAT(error_of([&] { i.fill(1.5); }),
              HasSubstr("fill(1.5) cannot be represented in int32: it is not a whole number"));
  EXPECT_THAT(error_of([&] { i.fill(std::nan("")); }), HasSubstr("NaN has no integer value"));
  EXPECT_THAT(error_of([&] { i.fill(std::int64_t{1} << 40); }), HasSubstr("cannot be represented in int32"));
  EXPECT_THAT(error_of([&] { l.fill(9.3e18); }), HasSubstr("cannot be represented in int64"));
  EXPECT_THAT(error_of([&] { b.fill(2); }), HasSubstr("fill(2) cannot be represented in bool"));
  EXPECT_THAT(error_of([&] { h.fill(70000); }), HasSubstr("fill(70000) cannot be represented in float16"));
  EXPECT_THAT(error_of([&] { f.fill(1e300); }), HasSubstr("cannot be represented in float32"));
  expect_all(i, std::int32_t{2147483647});  // the refused fills left the contents
  expect_all(f, std::numeric_limits<float>::infinity());
}

TYPED_TEST(Tensor, SpansAndElementsOnTheHostAndTheDevice) {
  const std::int64_t rows = 3 + static_cast<std::int64_t>(test::rng()() % 20);
  const std::int64_t cols = 3 + static_cast<std::int64_t>(test::rng()() % 20);
  tensor t{dtype::int32, {rows, cols}, this->dev(), {.label = "grid"}};
  EXPECT_EQ(t.numel(), static_cast<std::size_t>(rows * cols));
  std::span<std::int32_t> h = t.mutable_host_span<std::int32_t>();
  ASSERT_EQ(h.size(), t.numel());
  std::vector<std::int32_t> values(t.numel());
  for (auto& v : values) v = static_cast<std::int32_t>(test::rng()());
  std::copy(values.begin(), values.end(), h.begin());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(t.at<std::int32_t>({r, c}), values[static_cast<std::size_t>(r * cols + c)]);
    }
  }
  t.mutable_at<std::int32_t>({rows - 1, 1}) = 42;
  values[static_cast<std::size_t>((rows - 1) * cols + 1)] = 42;
  stream s{this->dev()};
  std::span<const std::int32_t> d = t.device_span<std::int32_t>(s);
  ASSERT_EQ(d.size(), t.numel());
  const auto on_device = read_device(s, d.data(), d.size_bytes());
  EXPECT_EQ(std::memcmp(on_device.data(), values.data(), d.size_bytes()), 0);
  // A view's span covers its elements only.
  tensor row = t.slice(1, 2);
  std::span<std::int32_t> w = row.mutable_device_span<std::int32_t>(s);
  ASSERT_EQ(w.size(), static_cast<std::size_t>(cols));
  const auto seed = test::fresh_seed();
  test::device_fill_pattern(s, w.data(), w.size_bytes(), seed);
  std::memcpy(values.data() + cols, pattern(seed, w.size_bytes()).data(), w.size_bytes());
  std::span<const std::int32_t> back = t.host_span<std::int32_t>();
  EXPECT_EQ(std::memcmp(back.data(), values.data(), back.size_bytes()), 0);

  EXPECT_THAT(error_of([&] { (void)t.at<std::int32_t>({0}); }),
              HasSubstr("tensor 'grid' int32 (" + std::to_string(rows) + ", " + std::to_string(cols) + ")"));
  EXPECT_THAT(error_of([&] { (void)t.at<std::int32_t>({0}); }),
              HasSubstr("at() was given 1 indices; the tensor has 2 axes"));
  const std::string c = std::to_string(cols);
  EXPECT_THAT(error_of([&] {
                (void)t.at<std::int32_t>({0, cols});
              }),
              HasSubstr("at(): index " + c + " of axis 1 is out of range [0, " + c + ")"));
  EXPECT_THAT(error_of([&] { (void)t.mutable_at<std::int32_t>({-1, 0}); }), HasSubstr("index -1 of axis 0"));
  EXPECT_TRUE(tensor{}.host_span<float>().empty());
}

// A typed accessor with the wrong T names the call that was made, not the
// accessor it is built on, and touches nothing.
TYPED_TEST(Tensor, ATypeMismatchNamesTheCallMade) {
  tensor t{dtype::float32, {3}, this->dev(), {.label = "weights"}};
  stream s{this->dev()};
  using I = std::int32_t;
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"host_data", [&] { (void)t.host_data<I>(); }},
      {"mutable_host_data", [&] { (void)t.mutable_host_data<I>(); }},
      {"device_data", [&] { (void)t.device_data<I>(s); }},
      {"device_data", [&] { (void)t.device_data<I>(); }},
      {"mutable_device_data", [&] { (void)t.mutable_device_data<I>(s); }},
      {"mutable_device_data", [&] { (void)t.mutable_device_data<I>(); }},
      {"host_span", [&] { (void)t.host_span<I>(); }},
      {"mutable_host_span", [&] { (void)t.mutable_host_span<I>(); }},
      {"device_span", [&] { (void)t.device_span<I>(s); }},
      {"device_span", [&] { (void)t.device_span<I>(); }},
      {"mutable_device_span", [&] { (void)t.mutable_device_span<I>(s); }},
      {"mutable_device_span", [&] { (void)t.mutable_device_span<I>(); }},
      {"at", [&] { (void)t.at<I>({0}); }},
      {"mutable_at", [&] { (void)t.mutable_at<I>({0}); }},
  };
  for (const auto& [name, call] : calls) {
    const std::string message = error_of(call);
    EXPECT_THAT(message, ::testing::StartsWith("syncmem: tensor 'weights' float32 (3) on " + to_string(this->dev()) +
                                               ": " + name +
                                               "<int32>() asks for int32 elements, but the tensor's "
                                               "dtype is float32 ["));
  }
  EXPECT_EQ(t.state(), sync_state::uninitialized);
}

TYPED_TEST(Tensor, AStreamOfAnotherDeviceIsRefusedNamingTheTensor) {
  SYNCMEM_REQUIRE_COUNT(2);
  tensor t{dtype::float32, {16}, this->dev(0), {.label = "activations"}};
  stream other{this->dev(1)};
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"device_data", error_of([&] { (void)t.device_data(other); })},
      {"device_data", error_of([&] { (void)t.device_data<float>(other); })},
      {"mutable_device_data", error_of([&] { (void)t.mutable_device_data(other); })},
      {"mutable_device_data", error_of([&] { (void)t.mutable_device_data<float>(other); })},
      {"device_span", error_of([&] { (void)t.device_span<float>(other); })},
      {"mutable_device_span", error_of([&] { (void)t.mutable_device_span<float>(other); })},
      {"fill", error_of([&] { t.fill(1.0F, other); })},
      {"zero", error_of([&] { t.zero(other); })},
      {"prefetch_to_device", error_of([&] { t.prefetch_to_device(other); })},
  };
  for (const auto& [name, message] : calls) {
    EXPECT_THAT(message, HasSubstr("tensor 'activations' float32 (16) on " + to_string(this->dev(0)) + ": " + name +
                                   " was given a stream of " + to_string(this->dev(1))));
  }
  EXPECT_EQ(t.state(), sync_state::uninitialized);
}

TYPED_TEST(Tensor, FillOfAViewTouchesOnlyItsElements) {
  tensor t{dtype::float32, {5, 3}, this->dev()};
  t.fill(-1.0F);
  stream s{this->dev()};
  tensor rows = t.slice(1, 3);
  rows.fill(7.0F, s);
  const float* p = t.host_data<float>();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(p[i], (i >= 3 && i < 9) ? 7.0F : -1.0F) << i;
  t.slice(4, 5).zero(s);
  EXPECT_EQ(t.host_data<float>()[12], 0.0F);
  EXPECT_EQ(t.host_data<float>()[11], -1.0F);
}

// ---- allclose --------------------------------------------------------------------------------

TYPED_TEST(Tensor, AllcloseComparesAsNumpyDoes) {
  tensor a{dtype::float32, {4}, this->dev()};
  tensor b{dtype::float64, {4}, this->dev()};
  const float av[] = {1.0F, -2.0F, 1e6F, 0.0F};
  const double bv[] = {1.0, -2.0, 1e6 + 5, 1e-9};
  std::memcpy(a.mutable_host_data(), av, sizeof av);
  std::memcpy(b.mutable_host_data(), bv, sizeof bv);
  EXPECT_TRUE(allclose(a, b));  // 5 <= 1e-5 × 1e6 + 1e-8
  EXPECT_FALSE(allclose(a, b, 1e-7));
  b.mutable_host_data<double>()[3] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(allclose(a, b));
  a.mutable_host_data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(allclose(a, b));
  EXPECT_TRUE(allclose(a, b, 1e-5, 1e-8, true));
  EXPECT_FALSE(allclose(a, b.view({2, 2})));
  tensor ints{dtype::int32, {4}, this->dev()};
  tensor same{dtype::int32, {4}, this->dev()};
  ints.fill(std::int32_t{3});
  same.fill(std::int32_t{3});
  EXPECT_TRUE(allclose(ints, same, 0, 0));
}

// Tensors made current on the device and back in one batch: views of one
// storage count once, tensors without storage are skipped, every byte arrives.
TYPED_TEST(Tensor, BatchedPrefetchOverTensors) {
  stream s{this->dev()};
  std::vector<tensor> list;
  std::vector<std::vector<std::uint8_t>> contents;
  for (int i = 0; i < 6; ++i) {
    tensor t{dtype::uint8, shape{3 + 7 * i, 5}, this->dev()};
    contents.push_back(test::random_bytes(t.nbytes()));
    std::memcpy(t.mutable_host_data<std::uint8_t>(), contents.back().data(), t.nbytes());
    list.push_back(t);
    list.push_back(t.slice(1, 2));  // a view of the same storage
  }
  list.emplace_back();  // no storage
  prefetch_to_device(list, s);
  for (std::size_t i = 0; i < contents.size(); ++i) {
    tensor& t = list[2 * i];
    EXPECT_EQ(t.storage()->counters().to_device_copies, 1U) << i;
    EXPECT_EQ(read_device(s, t.device_data<std::uint8_t>(s), t.nbytes()), contents[i]) << "tensor " << i;
    test::device_add_bytes(s, t.mutable_device_data<std::uint8_t>(s), t.nbytes(), 5);
    for (auto& b : contents[i]) b = static_cast<std::uint8_t>(b + 5);
  }
  prefetch_to_host(list, s);
  synchronize(list);
  for (std::size_t i = 0; i < contents.size(); ++i) {
    tensor& t = list[2 * i];
    EXPECT_EQ(t.storage()->counters().to_host_copies, 1U) << i;
    const std::uint8_t* h = t.host_data<std::uint8_t>();
    EXPECT_EQ(std::vector<std::uint8_t>(h, h + t.nbytes()), contents[i]) << "tensor " << i;
  }
}

}  // namespace
}  // namespace syncmem
