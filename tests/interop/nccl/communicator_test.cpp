// ctest-labels: threaded
// syncmem::nccl::communicator: every collective on every dtype and reduction,
// on tensors, device buffers and raw device memory, checked byte by byte
// against a host computation from fresh random data; stream ordering; the
// checks; ranks joined by id; registration of caching_resource segments.
// Emulated devices run everywhere; CUDA cases need two GPUs.
#include "syncmem/nccl/communicator.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/device_buffer.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/nccl/group.hpp"
#include "syncmem/tensor.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {
namespace {

using nccl::communicator;
using nccl::reduce_op;

constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::prod, reduce_op::min, reduce_op::max, reduce_op::avg};

// ---- element values as doubles -----------------------------------------------------------

void store(dtype t, void* base, std::size_t i, double v) {
  auto* p = static_cast<std::byte*>(base) + i * size_of(t);
  auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
  switch (t) {
    case dtype::bool_:
      return put(static_cast<std::uint8_t>(v != 0));
    case dtype::int8:
      return put(static_cast<std::int8_t>(v));
    case dtype::uint8:
      return put(static_cast<std::uint8_t>(v));
    case dtype::int16:
      return put(static_cast<std::int16_t>(v));
    case dtype::int32:
      return put(static_cast<std::int32_t>(v));
    case dtype::int64:
      return put(static_cast<std::int64_t>(v));
    case dtype::float16:
      return put(float16{static_cast<float>(v)});
    case dtype::bfloat16:
      return put(bfloat16{static_cast<float>(v)});
    case dtype::float32:
      return put(static_cast<float>(v));
    case dtype::float64:
      return put(v);
  }
}

double load(dtype t, const void* base, std::size_t i) {
  const auto* p = static_cast<const std::byte*>(base) + i * size_of(t);
  auto get = [p]<class T>(T) {
    T x;
    std::memcpy(&x, p, sizeof x);
    return x;
  };
  switch (t) {
    case dtype::bool_:
      return get(std::uint8_t{});
    case dtype::int8:
      return get(std::int8_t{});
    case dtype::uint8:
      return get(std::uint8_t{});
    case dtype::int16:
      return get(std::int16_t{});
    case dtype::int32:
      return get(std::int32_t{});
    case dtype::int64:
      return static_cast<double>(get(std::int64_t{}));
    case dtype::float16:
      return static_cast<float>(get(float16{}));
    case dtype::bfloat16:
      return static_cast<float>(get(bfloat16{}));
    case dtype::float32:
      return get(float{});
    case dtype::float64:
      return get(double{});
  }
  return 0;
}

// Small whole numbers: every sum, product, minimum and maximum of up to three
// of them is exact in every dtype, whatever the order NCCL reduces in.
std::vector<std::byte> small_values(dtype t, std::size_t count) {
  std::vector<std::byte> bytes(count * size_of(t));
  const int low = t == dtype::uint8 ? 0 : -3;
  std::uniform_int_distribution<int> pick{low, 3};
  for (std::size_t i = 0; i < count; ++i) store(t, bytes.data(), i, pick(rng()));
  return bytes;
}

std::vector<std::byte> random_data(std::size_t bytes) {
  const auto r = random_bytes(bytes);
  std::vector<std::byte> out(bytes);
  if (bytes > 0) std::memcpy(out.data(), r.data(), bytes);
  return out;
}

double combine(reduce_op op, double a, double b) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:
      return a + b;
    case reduce_op::prod:
      return a * b;
    case reduce_op::min:
      return std::min(a, b);
    case reduce_op::max:
      return std::max(a, b);
  }
  return a;
}

// Element i of op over `inputs`, as NCCL defines it.
double reduced(reduce_op op, dtype t, const std::vector<std::vector<std::byte>>& inputs, std::size_t i) {
  double acc = load(t, inputs[0].data(), i);
  for (std::size_t r = 1; r < inputs.size(); ++r) acc = combine(op, acc, load(t, inputs[r].data(), i));
  if (op == reduce_op::avg) acc /= static_cast<double>(inputs.size());
  return acc;
}

// Exact for everything but avg, which NCCL may compute as a sum of scaled
// terms: within a few units in the last place of the dtype.
void expect_element(reduce_op op, dtype t, double want, const void* got_base, std::size_t i, int rank) {
  const double got = load(t, got_base, i);
  if (op != reduce_op::avg) {
    std::vector<std::byte> expected(size_of(t));
    store(t, expected.data(), 0, want);
    ASSERT_EQ(std::memcmp(expected.data(), static_cast<const std::byte*>(got_base) + i * size_of(t), size_of(t)), 0)
        << "rank " << rank << " element " << i << ": got " << got << ", expected " << want << " (" << to_string(t)
        << ", " << nccl::to_string(op) << ")";
    return;
  }
  const double ulp = t == dtype::float16 ? 1e-3 : t == dtype::bfloat16 ? 8e-3 : t == dtype::float32 ? 1e-6 : 1e-14;
  ASSERT_NEAR(got, want, 4 * ulp * std::max(1.0, std::abs(want)))
      << "rank " << rank << " element " << i << " (" << to_string(t) << ", avg)";
}

// ---- fixture -----------------------------------------------------------------------------------

template <class Kind>
class communicator_test : public device_test<Kind> {
 protected:
  void SetUp() override { this->require(2); }

  // Two or three ranks, one per device, and a stream of each.
  void make(int ranks = 0) {
    const int n = ranks > 0 ? ranks : std::min(this->count(), 3);
    std::vector<device_id> devices;
    for (int r = 0; r < n; ++r) devices.push_back(this->dev(r));
    comms_ = communicator::create_all(devices);
    for (int r = 0; r < n; ++r) streams_.emplace_back(this->dev(r));
  }
  [[nodiscard]] int n() const { return static_cast<int>(comms_.size()); }
  communicator& comm(int r) { return comms_[static_cast<std::size_t>(r)]; }
  stream_view s(int r) const { return streams_[static_cast<std::size_t>(r)].view(); }
  // Runs f(r) for every rank, its calls issued together (one thread drives all ranks).
  template <class F>
  void each_rank(F f) {
    nccl::group g;
    for (int r = 0; r < n(); ++r) f(r);
    g.end();
  }
  tensor make_tensor(int r, dtype t, const shape& sh, const std::vector<std::byte>& contents) {
    tensor x{t, sh, this->dev(r)};
    if (x.nbytes() > 0) std::memcpy(x.mutable_host_data(), contents.data(), x.nbytes());
    return x;
  }
  static std::vector<std::byte> bytes_of(const tensor& x) {
    std::vector<std::byte> out(x.nbytes());
    if (!out.empty()) std::memcpy(out.data(), x.host_data(), out.size());
    return out;
  }

  std::vector<stream> streams_;
  std::vector<communicator> comms_;
};
TYPED_TEST_SUITE(communicator_test, device_kinds, device_kind_names);

std::size_t random_count(std::size_t most = 3000) { return std::uniform_int_distribution<std::size_t>{1, most}(rng()); }

TYPED_TEST(communicator_test, KnowsItsRanksAndDevices) {
  this->make();
  for (int r = 0; r < this->n(); ++r) {
    EXPECT_EQ(this->comm(r).rank(), r);
    EXPECT_EQ(this->comm(r).size(), this->n());
    EXPECT_EQ(this->comm(r).device(), this->dev(r));
    EXPECT_THAT(this->comm(r).to_string(), HasSubstr(to_string(this->dev(r))));
  }
}

TYPED_TEST(communicator_test, AllReducesTensorsOfEveryDtypeWithEveryOp) {
  this->make();
  for (const dtype t : all_dtypes) {
    for (const reduce_op op : all_ops) {
      SCOPED_TRACE(to_string(t) + " " + nccl::to_string(op));
      const std::size_t count = random_count();
      const shape sh{static_cast<std::int64_t>(count)};
      std::vector<std::vector<std::byte>> inputs;
      std::vector<tensor> send, recv;
      for (int r = 0; r < this->n(); ++r) {
        inputs.push_back(small_values(t, count));
        send.push_back(this->make_tensor(r, t, sh, inputs.back()));
        recv.push_back(this->make_tensor(r, t, sh, random_data(count * size_of(t))));
      }
      if (!nccl::can_reduce(t, op)) {
        const auto message = error_of([&] { this->comm(0).all_reduce(send[0], recv[0], op, this->s(0)); });
        EXPECT_THAT(message, HasSubstr(to_string(t)));
        continue;
      }
      this->each_rank([&](int r) { this->comm(r).all_reduce(send[r], recv[r], op, this->s(r)); });
      for (int r = 0; r < this->n(); ++r) {
        const auto got = this->bytes_of(recv[r]);
        for (std::size_t i = 0; i < count; ++i) {
          expect_element(op, t, reduced(op, t, inputs, i), got.data(), i, r);
          if (::testing::Test::HasFatalFailure()) return;
        }
        EXPECT_EQ(this->bytes_of(send[r]), inputs[r]) << "rank " << r << ": the send tensor changed";
      }
    }
  }
}

TYPED_TEST(communicator_test, AllReducesInPlaceOnBuffersAndRawMemory) {
  this->make();
  const dtype t = dtype::float32;
  const std::size_t count = random_count(100000);
  std::vector<std::vector<std::byte>> inputs;
  std::vector<tensor> inplace;
  std::vector<device_buffer> send, recv, raw;
  for (int r = 0; r < this->n(); ++r) {
    inputs.push_back(small_values(t, count));
    inplace.push_back(this->make_tensor(r, t, shape{static_cast<std::int64_t>(count)}, inputs.back()));
    send.emplace_back(inputs.back().data(), inputs.back().size(), this->s(r));
    recv.emplace_back(count * size_of(t), this->s(r));
    raw.emplace_back(inputs.back().data(), inputs.back().size(), this->s(r));
  }
  // One group: the three calls share no memory (NCCL runs them together).
  this->each_rank([&](int r) {
    this->comm(r).all_reduce(inplace[r], reduce_op::max, this->s(r));
    this->comm(r).all_reduce(send[r], recv[r], t, reduce_op::sum, this->s(r));
    // Raw pointers, in place.
    this->comm(r).all_reduce(raw[r].data(), raw[r].data(), count, t, reduce_op::min, this->s(r));
  });
  for (int r = 0; r < this->n(); ++r) {
    const auto max = this->bytes_of(inplace[r]);
    std::vector<std::byte> sum(count * size_of(t)), min(count * size_of(t)), sent(count * size_of(t));
    recv[r].copy_to_host(sum.data(), sum.size(), this->s(r));
    raw[r].copy_to_host(min.data(), min.size(), this->s(r));
    send[r].copy_to_host(sent.data(), sent.size(), this->s(r));
    EXPECT_EQ(sent, inputs[r]) << "rank " << r << ": the send buffer changed";
    for (std::size_t i = 0; i < count; ++i) {
      expect_element(reduce_op::max, t, reduced(reduce_op::max, t, inputs, i), max.data(), i, r);
      expect_element(reduce_op::sum, t, reduced(reduce_op::sum, t, inputs, i), sum.data(), i, r);
      expect_element(reduce_op::min, t, reduced(reduce_op::min, t, inputs, i), min.data(), i, r);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// NCCL fuses a group's calls into one launch, in no order: a call that writes
// memory another call of the group reads or writes is refused before it is
// enqueued, and the rest of the group runs.
TYPED_TEST(communicator_test, RefusesCallsOfOneGroupThatRaceOnTheirMemory) {
  this->make();
  const dtype t = dtype::int32;
  const std::size_t count = random_count(4000);
  const std::size_t bytes = count * size_of(t);
  std::vector<std::vector<std::byte>> inputs;
  std::vector<device_buffer> send, sum, max;
  for (int r = 0; r < this->n(); ++r) {
    inputs.push_back(small_values(t, count));
    send.emplace_back(inputs.back().data(), bytes, this->s(r));
    sum.emplace_back(bytes, this->s(r));
    max.emplace_back(bytes, this->s(r));
  }
  std::vector<std::string> errors;
  this->each_rank([&](int r) {
    auto& c = this->comm(r);
    c.all_reduce(send[r], sum[r], t, reduce_op::sum, this->s(r));
    c.all_reduce(send[r], max[r], t, reduce_op::max, this->s(r));  // reads send too: allowed
    errors.push_back(
        error_of([&] { c.all_reduce(send[r].data(), send[r].data(), count, t, reduce_op::min, this->s(r)); }));
    errors.push_back(error_of([&] { c.all_reduce(max[r], sum[r], t, reduce_op::sum, this->s(r)); }));
    errors.push_back(error_of([&] { c.send(sum[r], t, (r + 1) % this->n(), this->s(r)); }));
  });
  const std::string n = std::to_string(count);
  for (int r = 0; r < this->n(); ++r) {
    const std::string owner = this->comm(r).to_string();
    const std::string first = "all_reduce of " + n + " int32 (sum) of " + owner;
    const auto at = static_cast<std::size_t>(3 * r);
    EXPECT_THAT(errors[at], HasSubstr(owner + ": all_reduce of " + n + " int32 (min) writes memory that " + first +
                                      " reads, earlier in the same nccl::group"));
    EXPECT_THAT(errors[at], HasSubstr("end the group between them"));
    EXPECT_THAT(errors[at + 1],
                HasSubstr("all_reduce of " + n + " int32 (sum) writes memory that " + first + " writes"));
    EXPECT_THAT(errors[at + 2],
                HasSubstr(owner + ": send of " + n + " int32 to rank " + std::to_string((r + 1) % this->n()) +
                          " reads memory that " + first + " writes"));
  }
  for (int r = 0; r < this->n(); ++r) {
    std::vector<std::byte> got_sum(bytes), got_max(bytes), sent(bytes);
    sum[r].copy_to_host(got_sum.data(), bytes, this->s(r));
    max[r].copy_to_host(got_max.data(), bytes, this->s(r));
    send[r].copy_to_host(sent.data(), bytes, this->s(r));
    EXPECT_EQ(sent, inputs[r]) << "rank " << r << ": a refused call wrote the send buffer";
    for (std::size_t i = 0; i < count; ++i) {
      expect_element(reduce_op::sum, t, reduced(reduce_op::sum, t, inputs, i), got_sum.data(), i, r);
      expect_element(reduce_op::max, t, reduced(reduce_op::max, t, inputs, i), got_max.data(), i, r);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  // In a group of its own, the refused in-place call runs.
  this->each_rank(
      [&](int r) { this->comm(r).all_reduce(send[r].data(), send[r].data(), count, t, reduce_op::min, this->s(r)); });
  for (int r = 0; r < this->n(); ++r) {
    std::vector<std::byte> got(bytes);
    send[r].copy_to_host(got.data(), bytes, this->s(r));
    for (std::size_t i = 0; i < count; ++i) {
      expect_element(reduce_op::min, t, reduced(reduce_op::min, t, inputs, i), got.data(), i, r);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// A group whose ranks disagree (a call refused on one rank only, counts that
// differ, a send nobody receives) issues none of its calls: NCCL would wait
// for ever for the missing or different one. The ranks' buffers stay as they
// were, and a matching group afterwards runs as usual.
TYPED_TEST(communicator_test, AGroupWhoseRanksDisagreeIssuesNoneOfItsCalls) {
  this->make(2);
  const dtype t = dtype::int32;
  const std::size_t count = random_count(4000);
  const std::size_t bytes = count * size_of(t);
  std::vector<std::vector<std::byte>> inputs;
  std::vector<device_buffer> x;
  for (int r = 0; r < 2; ++r) {
    inputs.push_back(small_values(t, count));
    x.emplace_back(inputs.back().data(), bytes, this->s(r));
  }
  std::vector<std::byte> pageable(bytes);
  const auto unchanged = [&](const std::string& what) {
    for (int r = 0; r < 2; ++r) {
      std::vector<std::byte> got(bytes);
      x[r].copy_to_host(got.data(), bytes, this->s(r));  // would wait for a call left alone
      EXPECT_EQ(got, inputs[r]) << what << ": rank " << r << " ran a call";
    }
  };
  const std::string n = std::to_string(count);
  {
    nccl::group g;
    this->comm(0).all_reduce(x[0], x[0], t, reduce_op::sum, this->s(0));
    EXPECT_THAT(
        error_of([&] { this->comm(1).all_reduce(pageable.data(), x[1].data(), count, t, reduce_op::sum, this->s(1)); }),
        HasSubstr("expected device memory"));
    const std::string error = error_of([&] { g.end(); });
    EXPECT_THAT(error, HasSubstr("do not match"));
    EXPECT_THAT(error, HasSubstr(this->comm(0).to_string() + ": all_reduce of " + n + " int32 (sum)"));
    EXPECT_THAT(error, HasSubstr(this->comm(1).to_string() + ": a refused all_reduce"));
    EXPECT_THAT(error, HasSubstr("none of the group's calls was issued"));
  }
  unchanged("a call refused on one rank");
  {
    nccl::group g;
    this->comm(0).all_reduce(x[0].data(), x[0].data(), count, t, reduce_op::sum, this->s(0));
    this->comm(1).all_reduce(x[1].data(), x[1].data(), count - 1, t, reduce_op::sum, this->s(1));
    EXPECT_THAT(error_of([&] { g.end(); }),
                HasSubstr(this->comm(1).to_string() + ": all_reduce of " + std::to_string(count - 1) + " int32"));
  }
  unchanged("counts that differ");
  {
    nccl::group g;
    device_buffer y0{bytes, this->s(0)}, y1{bytes, this->s(1)};
    this->comm(0).send(x[0], t, 1, this->s(0));
    this->comm(1).all_reduce(y1, y1, t, reduce_op::sum, this->s(1));
    this->comm(0).all_reduce(y0, y0, t, reduce_op::sum, this->s(0));
    EXPECT_THAT(error_of([&] { g.end(); }), HasSubstr("send of " + n + " int32 to rank 1"));
  }
  unchanged("a send nobody receives");
  // The destructor reports the same (logged), and issues nothing either.
  {
    nccl::group g;
    this->comm(0).broadcast(x[0], t, 0, this->s(0));
    this->comm(1).broadcast(x[1], t, 1, this->s(1));
  }
  unchanged("roots that differ, the group left to its destructor");
  this->each_rank([&](int r) { this->comm(r).all_reduce(x[r], x[r], t, reduce_op::sum, this->s(r)); });
  for (int r = 0; r < 2; ++r) {
    std::vector<std::byte> got(bytes);
    x[r].copy_to_host(got.data(), bytes, this->s(r));
    for (std::size_t i = 0; i < count; ++i) {
      expect_element(reduce_op::sum, t, reduced(reduce_op::sum, t, inputs, i), got.data(), i, r);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TYPED_TEST(communicator_test, ReduceScattersEveryDtypeWithEveryOp) {
  this->make();
  for (const dtype t : all_dtypes) {
    for (const reduce_op op : all_ops) {
      if (!nccl::can_reduce(t, op)) continue;
      SCOPED_TRACE(to_string(t) + " " + nccl::to_string(op));
      const auto rows = static_cast<std::int64_t>(random_count(300));
      const std::size_t part = static_cast<std::size_t>(rows) * 3;
      const std::size_t whole = part * static_cast<std::size_t>(this->n());
      std::vector<std::vector<std::byte>> inputs;
      std::vector<tensor> send, recv;
      for (int r = 0; r < this->n(); ++r) {
        inputs.push_back(small_values(t, whole));
        // (n × rows, 3) on even ranks, (n, rows, 3) on odd ones: both are accepted.
        const shape sh = r % 2 == 0 ? shape{this->n() * rows, 3} : shape{this->n(), rows, 3};
        send.push_back(this->make_tensor(r, t, sh, inputs.back()));
        recv.push_back(this->make_tensor(r, t, shape{rows, 3}, random_data(part * size_of(t))));
      }
      this->each_rank([&](int r) { this->comm(r).reduce_scatter(send[r], recv[r], op, this->s(r)); });
      for (int r = 0; r < this->n(); ++r) {
        const auto got = this->bytes_of(recv[r]);
        for (std::size_t i = 0; i < part; ++i) {
          expect_element(op, t, reduced(op, t, inputs, static_cast<std::size_t>(r) * part + i), got.data(), i, r);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TYPED_TEST(communicator_test, AllGathersEveryDtype) {
  this->make();
  for (const dtype t : all_dtypes) {
    SCOPED_TRACE(to_string(t));
    const auto rows = static_cast<std::int64_t>(random_count(500));
    const std::size_t part = static_cast<std::size_t>(rows) * 2 * size_of(t);
    std::vector<std::vector<std::byte>> inputs;
    std::vector<tensor> send, recv;
    for (int r = 0; r < this->n(); ++r) {
      inputs.push_back(random_data(part));
      send.push_back(this->make_tensor(r, t, shape{rows, 2}, inputs.back()));
      const shape sh = r % 2 == 0 ? shape{this->n() * rows, 2} : shape{this->n(), rows, 2};
      recv.push_back(this->make_tensor(r, t, sh, random_data(part * static_cast<std::size_t>(this->n()))));
    }
    this->each_rank([&](int r) { this->comm(r).all_gather(send[r], recv[r], this->s(r)); });
    std::vector<std::byte> expected;
    for (const auto& in : inputs) expected.insert(expected.end(), in.begin(), in.end());
    for (int r = 0; r < this->n(); ++r) EXPECT_EQ(this->bytes_of(recv[r]), expected) << "rank " << r;
  }
}

TYPED_TEST(communicator_test, AllGathersBuffersInPlace) {
  this->make();
  const std::size_t part = random_count(1 << 16);
  const auto total = part * static_cast<std::size_t>(this->n());
  std::vector<std::vector<std::byte>> inputs;
  std::vector<device_buffer> whole;
  for (int r = 0; r < this->n(); ++r) {
    inputs.push_back(random_data(part));
    whole.emplace_back(total, this->s(r));
    whole.back().copy_from_host(inputs.back().data(), part, this->s(r), static_cast<std::size_t>(r) * part);
  }
  this->each_rank([&](int r) {
    auto* base = static_cast<std::byte*>(whole[r].data());
    this->comm(r).all_gather(base + static_cast<std::size_t>(r) * part, base, part, dtype::uint8, this->s(r));
  });
  std::vector<std::byte> expected;
  for (const auto& in : inputs) expected.insert(expected.end(), in.begin(), in.end());
  for (int r = 0; r < this->n(); ++r) {
    std::vector<std::byte> got(total);
    whole[r].copy_to_host(got.data(), total, this->s(r));
    EXPECT_EQ(got, expected) << "rank " << r;
  }
}

TYPED_TEST(communicator_test, BroadcastsEveryDtypeFromEveryRoot) {
  this->make();
  for (const dtype t : all_dtypes) {
    for (int root = 0; root < this->n(); ++root) {
      SCOPED_TRACE(to_string(t) + " from " + std::to_string(root));
      const std::size_t count = random_count();
      std::vector<std::vector<std::byte>> inputs;
      std::vector<tensor> x;
      for (int r = 0; r < this->n(); ++r) {
        inputs.push_back(random_data(count * size_of(t)));
        x.push_back(this->make_tensor(r, t, shape{static_cast<std::int64_t>(count)}, inputs.back()));
      }
      this->each_rank([&](int r) { this->comm(r).broadcast(x[r], root, this->s(r)); });
      for (int r = 0; r < this->n(); ++r) {
        EXPECT_EQ(this->bytes_of(x[r]), inputs[static_cast<std::size_t>(root)]) << "rank " << r;
      }
    }
  }
}

TYPED_TEST(communicator_test, SendsAndReceivesAroundARingInEveryDtype) {
  this->make();
  for (const dtype t : all_dtypes) {
    SCOPED_TRACE(to_string(t));
    const std::size_t count = random_count();
    std::vector<std::vector<std::byte>> inputs;
    std::vector<tensor> out, in;
    std::vector<device_buffer> buffer_out, buffer_in;
    for (int r = 0; r < this->n(); ++r) {
      inputs.push_back(random_data(count * size_of(t)));
      out.push_back(this->make_tensor(r, t, shape{static_cast<std::int64_t>(count)}, inputs.back()));
      in.push_back(this->make_tensor(r, t, shape{static_cast<std::int64_t>(count)}, random_data(count * size_of(t))));
      buffer_out.emplace_back(inputs.back().data(), inputs.back().size(), this->s(r));
      buffer_in.emplace_back(inputs.back().size(), this->s(r));
    }
    this->each_rank([&](int r) {
      const int next = (r + 1) % this->n();
      const int previous = (r + this->n() - 1) % this->n();
      this->comm(r).send(out[r], next, this->s(r));
      this->comm(r).recv(in[r], previous, this->s(r));
      this->comm(r).send(buffer_out[r], t, previous, this->s(r));
      this->comm(r).recv(buffer_in[r], t, next, this->s(r));
    });
    for (int r = 0; r < this->n(); ++r) {
      const auto previous = static_cast<std::size_t>((r + this->n() - 1) % this->n());
      const auto next = static_cast<std::size_t>((r + 1) % this->n());
      EXPECT_EQ(this->bytes_of(in[r]), inputs[previous]) << "rank " << r;
      std::vector<std::byte> got(inputs[next].size());
      buffer_in[r].copy_to_host(got.data(), got.size(), this->s(r));
      EXPECT_EQ(got, inputs[next]) << "rank " << r;
    }
  }
}

// A buffer written on its own stream (held until every call is enqueued) is
// read by the collective on another stream only after that write; the
// buffer's stream reads the result only after the collective.
TYPED_TEST(communicator_test, OrdersDeviceBuffersWithTheirOwnStreams) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  this->make();
  const std::size_t part = random_count(1 << 20);
  const auto total = part * static_cast<std::size_t>(this->n());
  const std::uint64_t seed = fresh_seed();
  std::vector<stream> own;
  std::vector<device_buffer> send, recv;
  for (int r = 0; r < this->n(); ++r) {
    own.emplace_back(this->dev(r));
    send.emplace_back(part, own.back());
    recv.emplace_back(total, own.back());
  }
  {
    std::vector<std::unique_ptr<stream_latch>> holds;
    for (int r = 0; r < this->n(); ++r) {
      holds.push_back(std::make_unique<stream_latch>(own[static_cast<std::size_t>(r)]));
      device_fill_pattern(own[static_cast<std::size_t>(r)], send[r].data(), part, seed + static_cast<std::uint64_t>(r));
    }
    this->each_rank([&](int r) { this->comm(r).all_gather(send[r], recv[r], dtype::uint8, this->s(r)); });
    for (auto& h : holds) h->release();
  }
  for (int r = 0; r < this->n(); ++r) {
    const auto got = read_device(own[static_cast<std::size_t>(r)], recv[r].data(), total);
    for (std::size_t q = 0; q < static_cast<std::size_t>(this->n()); ++q) {
      for (std::size_t i = 0; i < part; ++i) {
        ASSERT_EQ(got[q * part + i], pattern_byte(seed + q, i)) << "rank " << r << ", part " << q << ", byte " << i;
      }
    }
  }
}

// The other way: work enqueued on a buffer's own stream after the collective
// (on another stream, unable to finish while another rank is held) waits for
// it, also when the call was made in a group (NCCL enqueues it at the end).
TYPED_TEST(communicator_test, LaterWorkOnABuffersOwnStreamWaitsForTheCollective) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  this->make();
  const std::size_t count = random_count(1 << 18);
  std::vector<std::vector<std::byte>> inputs;
  std::vector<stream> own;
  std::vector<device_buffer> buffers;
  for (int r = 0; r < this->n(); ++r) {
    own.emplace_back(this->dev(r));
    inputs.push_back(small_values(dtype::int32, count));
    buffers.emplace_back(inputs.back().data(), inputs.back().size(), own.back());
  }
  std::vector<std::uint8_t> got;
  {
    // Rank 1's collective stream is held, so rank 0's collective cannot finish before it is let go.
    stream_latch hold{this->s(1)};
    this->each_rank(
        [&](int r) { this->comm(r).all_reduce(buffers[r], buffers[r], dtype::int32, reduce_op::sum, this->s(r)); });
    got = while_held(hold, [&] { return read_device(own[0], buffers[0].data(), count * sizeof(std::int32_t)); });
  }
  for (std::size_t i = 0; i < count; ++i) {
    expect_element(reduce_op::sum, dtype::int32, reduced(reduce_op::sum, dtype::int32, inputs, i), got.data(), i, 0);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TYPED_TEST(communicator_test, RefusesBadArgumentsNamingThemAndEnqueuesNothing) {
  this->make(2);
  auto& c = this->comm(0);
  const auto s = this->s(0);
  tensor f32{dtype::float32, shape{8}, this->dev(0)};
  tensor f32b{dtype::float32, shape{8}, this->dev(0)};
  tensor i32{dtype::int32, shape{8}, this->dev(0)};
  tensor f32_9{dtype::float32, shape{9}, this->dev(0)};
  tensor other{dtype::float32, shape{8}, this->dev(1)};
  tensor i16{dtype::int16, shape{8}, this->dev(0)};
  tensor b{dtype::bool_, shape{8}, this->dev(0)};
  device_buffer odd{10, s};
  device_buffer even{16, s};
  std::vector<std::byte> host(64);
  EXPECT_THAT(error_of([&] { c.all_reduce(f32, i32, reduce_op::sum, s); }),
              HasSubstr("recv is int32, expected float32"));
  EXPECT_THAT(error_of([&] { c.all_reduce(f32, f32_9, reduce_op::sum, s); }),
              HasSubstr("recv has shape (9), expected (8)"));
  EXPECT_THAT(error_of([&] { c.all_reduce(f32, other, reduce_op::sum, s); }), HasSubstr("expected a tensor on"));
  EXPECT_THAT(error_of([&] { c.all_reduce(f32, f32b, reduce_op::sum, this->s(1)); }),
              HasSubstr("expected a stream of " + to_string(this->dev(0))));
  EXPECT_THAT(error_of([&] { c.all_reduce(i16, reduce_op::sum, s); }), HasSubstr("dtype int16 has no reduction"));
  EXPECT_THAT(error_of([&] { c.all_reduce(b, reduce_op::max, s); }), HasSubstr("dtype bool has no reduction"));
  EXPECT_THAT(error_of([&] { c.all_reduce(i32, reduce_op::avg, s); }), HasSubstr("avg needs a floating-point dtype"));
  EXPECT_THAT(error_of([&] { c.broadcast(f32, 2, s); }), HasSubstr("root is 2: valid range is [0, 2)"));
  EXPECT_THAT(error_of([&] { c.send(f32, 0, s); }), HasSubstr("peer is 0, this rank itself"));
  EXPECT_THAT(error_of([&] { c.recv(f32, -1, s); }), HasSubstr("peer is -1: valid range is [0, 2)"));
  EXPECT_THAT(error_of([&] { c.all_gather(f32, f32b, s); }), HasSubstr("recv has shape (8), expected (16) or (2, 8)"));
  EXPECT_THAT(error_of([&] { c.reduce_scatter(f32, f32b, reduce_op::sum, s); }),
              HasSubstr("send has shape (8), expected (16) or (2, 8)"));
  EXPECT_THAT(error_of([&] { c.all_reduce(odd, even, dtype::float32, reduce_op::sum, s); }),
              HasSubstr("send has 10 bytes, not a whole number of float32 elements"));
  EXPECT_THAT(error_of([&] { c.all_gather(even, even, dtype::float32, s); }),
              HasSubstr("recv has 4 float32 elements, expected 8"));
  EXPECT_THAT(error_of([&] { c.all_reduce(nullptr, even.data(), 4, dtype::float32, reduce_op::sum, s); }),
              HasSubstr("send is null for 16 bytes"));
  EXPECT_THAT(error_of([&] { c.all_reduce(host.data(), even.data(), 4, dtype::float32, reduce_op::sum, s); }),
              HasSubstr("is pageable memory, expected device memory of " + to_string(this->dev(0))));
  // Past the end of the allocation the pointer lies in (a caching_resource segment of a few MiB).
  EXPECT_THAT(error_of([&] { c.all_reduce(even.data(), even.data(), 1 << 24, dtype::float32, reduce_op::sum, s); }),
              HasSubstr("the call needs 67108864"));
  auto* base = static_cast<std::byte*>(even.data());
  EXPECT_THAT(error_of([&] { c.all_reduce(base, base + 4, 2, dtype::float32, reduce_op::sum, s); }),
              HasSubstr("send and recv overlap"));
  tensor low = f32.slice(0, 4);
  tensor high = f32.slice(2, 6);
  EXPECT_THAT(error_of([&] { c.all_reduce(low, high, reduce_op::sum, s); }), HasSubstr("overlap in one storage"));

  // None of those reached the communicator: a matching call on both ranks still works.
  const std::vector<std::byte> zeros(8 * sizeof(float));
  tensor x0 = this->make_tensor(0, dtype::float32, shape{8}, small_values(dtype::float32, 8));
  tensor x1 = this->make_tensor(1, dtype::float32, shape{8}, zeros);
  const auto expected = this->bytes_of(x0);
  this->each_rank([&](int r) { this->comm(r).all_reduce(r == 0 ? x0 : x1, reduce_op::sum, this->s(r)); });
  EXPECT_EQ(this->bytes_of(x1), expected);
}

TYPED_TEST(communicator_test, CreateAllRefusesBadDeviceLists) {
  const std::vector<device_id> none;
  EXPECT_THAT(error_of([&] { return communicator::create_all(none); }), HasSubstr("devices is empty"));
  const std::vector<device_id> twice{this->dev(0), this->dev(0)};
  EXPECT_THAT(error_of([&] { return communicator::create_all(twice); }), HasSubstr("appears twice"));
  EXPECT_THAT(error_of([&] {
                return communicator{nccl::unique_id{}, 2, 2, this->dev(0)};
              }),
              HasSubstr("rank is 2: valid range is [0, 2)"));
}

TYPED_TEST(communicator_test, RanksJoinByIdFromTheirOwnThreads) {
  const int n = std::min(this->count(), 3);
  const auto id = nccl::make_unique_id(this->kind);
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(small_values(dtype::int64, 1000));
  std::vector<std::vector<std::byte>> results(static_cast<std::size_t>(n));
  const auto failures = run_threads(n, [&](int r) {
    communicator c{id, n, r, this->dev(r)};
    stream s{this->dev(r)};
    tensor x{dtype::int64, shape{1000}, this->dev(r)};
    std::memcpy(x.mutable_host_data(), inputs[static_cast<std::size_t>(r)].data(), x.nbytes());
    c.all_reduce(x, reduce_op::sum, s);
    results[static_cast<std::size_t>(r)].resize(x.nbytes());
    std::memcpy(results[static_cast<std::size_t>(r)].data(), x.host_data(), x.nbytes());
  });
  ASSERT_EQ(failures.count, 0) << failures.first;
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < 1000; ++i) {
      expect_element(reduce_op::sum, dtype::int64, reduced(reduce_op::sum, dtype::int64, inputs, i),
                     results[static_cast<std::size_t>(r)].data(), i, r);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Emulated devices report what NCCL would hang on: ranks whose calls differ.
// (Emulated only: on CUDA devices NCCL hangs.)
TEST(communicator_emulated, ReportsCallsThatDoNotMatchAcrossRanks) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::emulated, 2);
  const std::vector<device_id> devices{device_id::emulated(0), device_id::emulated(1)};
  auto comms = communicator::create_all(devices);
  stream s0{devices[0]};
  stream s1{devices[1]};
  device_buffer a{40, s0};
  device_buffer b{48, s1};
  comms[0].all_reduce(a, a, dtype::float32, reduce_op::sum, s0);
  comms[1].all_reduce(b, b, dtype::float32, reduce_op::sum, s1);
  for (const stream* s : {&s0, &s1}) {
    try {
      s->synchronize();
      ADD_FAILURE() << "a rank saw no error";
    } catch (const std::exception& e) {
      EXPECT_THAT(e.what(), HasSubstr("does not match across ranks: rank 0: all_reduce of 10 float32 (sum); rank 1: "
                                      "all_reduce of 12 float32 (sum)"));
    }
  }
}

// NCCL's rule for registered buffers: all ranks or none. Emulated devices check it.
TEST(communicator_emulated, ReportsRanksThatMixRegisteredAndUnregisteredBuffers) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::emulated, 2);
  const std::vector<device_id> devices{device_id::emulated(0), device_id::emulated(1)};
  auto comms = communicator::create_all(devices);
  mr::caching_resource pool0{devices[0]};
  mr::caching_resource pool1{devices[1]};
  comms[0].register_segments(pool0);  // rank 1's pool is left unregistered
  stream s0{devices[0]};
  stream s1{devices[1]};
  device_buffer a{64, s0, &pool0};
  device_buffer b{64, s1, &pool1};
  comms[0].all_reduce(a, a, dtype::int32, reduce_op::sum, s0);
  comms[1].all_reduce(b, b, dtype::int32, reduce_op::sum, s1);
  comms[0].send(a, dtype::int32, 1, s0);
  comms[1].recv(b, dtype::int32, 0, s1);
  for (const stream* s : {&s0, &s1}) {
    try {
      s->synchronize();
      ADD_FAILURE() << "a rank saw no error";
    } catch (const std::exception& e) {
      EXPECT_THAT(e.what(), HasSubstr("some ranks' buffers are registered (ncclCommRegister) and some not"));
      EXPECT_THAT(e.what(), HasSubstr("rank 0: all_reduce of 16 int32 (sum), in registered memory; rank 1: "
                                      "all_reduce of 16 int32 (sum), in unregistered memory"));
    }
  }
}

// ---- registration of a caching_resource's segments ----------------------------------------

TYPED_TEST(communicator_test, RegistersEachSegmentOnceAndDeregistersItBeforeItGoes) {
  this->make(2);
  std::vector<std::unique_ptr<mr::caching_resource>> pools;
  for (int r = 0; r < 2; ++r) {
    pools.push_back(
        std::make_unique<mr::caching_resource>(this->dev(r), mr::caching_options::parse("thread_cache_mb:0")));
  }
  constexpr std::size_t MiB = std::size_t{1} << 20;
  // A segment held before registration is registered too.
  auto early = std::make_unique<device_buffer>(3 * MiB, this->s(0), pools[0].get());
  for (int r = 0; r < 2; ++r) this->comm(r).register_segments(*pools[static_cast<std::size_t>(r)]);
  EXPECT_EQ(this->comm(0).registrations().segments, 1U);
  EXPECT_THAT(error_of([&] { this->comm(0).register_segments(*pools[0]); }), HasSubstr("registered already"));
  EXPECT_THAT(error_of([&] { this->comm(0).register_segments(*pools[1]); }), HasSubstr("belongs to another device"));

  // Many buffers from few segments: each segment registered once; the results are right.
  const dtype t = dtype::bfloat16;
  std::vector<std::vector<std::vector<std::byte>>> inputs(2);
  std::vector<std::vector<device_buffer>> buffers(2);
  const std::size_t sizes[] = {512, 4096, 100000, 3 * MiB, 5 * MiB};
  for (int r = 0; r < 2; ++r) {
    for (const std::size_t bytes : sizes) {
      inputs[static_cast<std::size_t>(r)].push_back(small_values(t, bytes / 2));
      buffers[static_cast<std::size_t>(r)].emplace_back(inputs[static_cast<std::size_t>(r)].back().data(), bytes,
                                                        this->s(r), pools[static_cast<std::size_t>(r)].get());
    }
  }
  for (int r = 0; r < 2; ++r) {
    const auto& pool = *pools[static_cast<std::size_t>(r)];
    const auto got = this->comm(r).registrations();
    EXPECT_EQ(got.segments, pool.statistics().segments) << "rank " << r;
    EXPECT_EQ(got.failures, 0U);
    EXPECT_EQ(got.registrations, got.segments);
  }
  this->each_rank([&](int r) {
    for (auto& b : buffers[static_cast<std::size_t>(r)]) this->comm(r).all_reduce(b, b, t, reduce_op::sum, this->s(r));
  });
  for (int r = 0; r < 2; ++r) {
    for (std::size_t k = 0; k < std::size(sizes); ++k) {
      std::vector<std::byte> got(sizes[k]);
      buffers[static_cast<std::size_t>(r)][k].copy_to_host(got.data(), got.size(), this->s(r));
      const std::vector<std::vector<std::byte>> both{inputs[0][k], inputs[1][k]};
      for (std::size_t i = 0; i < sizes[k] / 2; ++i) {
        expect_element(reduce_op::sum, t, reduced(reduce_op::sum, t, both, i), got.data(), i, r);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }

  // Segments given back are deregistered first; the counts follow the pool.
  buffers[0].clear();
  early.reset();
  pools[0]->empty_cache();
  const auto after = this->comm(0).registrations();
  EXPECT_EQ(after.segments, pools[0]->statistics().segments);
  EXPECT_EQ(after.registrations - after.deregistrations, after.segments);
  EXPECT_GT(after.deregistrations, 0U);

  this->comm(1).unregister_segments(*pools[1]);
  EXPECT_EQ(this->comm(1).registrations().segments, 0U);
  EXPECT_THAT(error_of([&] { this->comm(1).unregister_segments(*pools[1]); }), HasSubstr("was not registered"));
  buffers[1].clear();
}

}  // namespace
}  // namespace syncmem::test
