// ctest-labels: threaded
// Caffe's SyncedMemory and Blob on syncmem: Caffe's own tests
// (src/caffe/test/test_syncedmem.cpp and test_blob.cpp) re-expressed call by
// call on the compat device (CUDA when there is a GPU, else emulated), plus
// the defects Caffe had.
#include "syncmem/compat/caffe.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "device_ops.hpp"
#include "syncmem/compat/device.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

using compat::caffe::Blob;
using compat::caffe::SyncedMemory;

// Caffe's tests use cudaMemcpy and caffe_gpu_memset on device pointers.
void gpu_memset(void* p, int value, std::size_t n) {
  const auto device = compat::current();
  device_guard guard{device};
  auto s = default_stream(device);
  detail::backend_for(device).memset_async(p, value, n, device.index(), s.handle());
  s.synchronize();
}

std::vector<std::uint8_t> gpu_read(const void* p, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  copy(out.data(), p, n, default_stream(compat::current()));
  return out;
}

// ---- test_syncedmem.cpp ----------------------------------------------------------

TEST(CaffeSyncedMemory, TestInitialization) {
  SyncedMemory mem(10);
  EXPECT_EQ(mem.head(), SyncedMemory::UNINITIALIZED);
  EXPECT_EQ(mem.size(), 10U);
  auto* p_mem = new SyncedMemory(10 * sizeof(float));
  EXPECT_EQ(p_mem->size(), 10 * sizeof(float));
  delete p_mem;
}

TEST(CaffeSyncedMemory, TestAllocationCPUGPU) {
  SyncedMemory mem(10);
  EXPECT_TRUE(mem.cpu_data());
  EXPECT_TRUE(mem.gpu_data());
  EXPECT_TRUE(mem.mutable_cpu_data());
  EXPECT_TRUE(mem.mutable_gpu_data());
}

TEST(CaffeSyncedMemory, TestAllocationCPU) {
  SyncedMemory mem(10);
  EXPECT_TRUE(mem.cpu_data());
  EXPECT_TRUE(mem.mutable_cpu_data());
}

TEST(CaffeSyncedMemory, TestAllocationGPU) {
  SyncedMemory mem(10);
  EXPECT_TRUE(mem.gpu_data());
  EXPECT_TRUE(mem.mutable_gpu_data());
}

TEST(CaffeSyncedMemory, TestCPUWrite) {
  SyncedMemory mem(10);
  void* cpu_data = mem.mutable_cpu_data();
  EXPECT_EQ(mem.head(), SyncedMemory::HEAD_AT_CPU);
  std::memset(cpu_data, 1, mem.size());
  for (std::size_t i = 0; i < mem.size(); ++i) EXPECT_EQ(static_cast<char*>(cpu_data)[i], 1);
  // do another round
  cpu_data = mem.mutable_cpu_data();
  EXPECT_EQ(mem.head(), SyncedMemory::HEAD_AT_CPU);
  std::memset(cpu_data, 2, mem.size());
  for (std::size_t i = 0; i < mem.size(); ++i) EXPECT_EQ(static_cast<char*>(cpu_data)[i], 2);
}

TEST(CaffeSyncedMemory, TestGPURead) {
  SyncedMemory mem(10);
  void* cpu_data = mem.mutable_cpu_data();
  EXPECT_EQ(mem.head(), SyncedMemory::HEAD_AT_CPU);
  std::memset(cpu_data, 1, mem.size());
  const void* gpu_data = mem.gpu_data();
  EXPECT_EQ(mem.head(), SyncedMemory::SYNCED);
  EXPECT_EQ(gpu_read(gpu_data, mem.size()), std::vector<std::uint8_t>(mem.size(), 1));
  // do another round
  cpu_data = mem.mutable_cpu_data();
  EXPECT_EQ(mem.head(), SyncedMemory::HEAD_AT_CPU);
  std::memset(cpu_data, 2, mem.size());
  for (std::size_t i = 0; i < mem.size(); ++i) EXPECT_EQ(static_cast<char*>(cpu_data)[i], 2);
  gpu_data = mem.gpu_data();
  EXPECT_EQ(mem.head(), SyncedMemory::SYNCED);
  EXPECT_EQ(gpu_read(gpu_data, mem.size()), std::vector<std::uint8_t>(mem.size(), 2));
}

TEST(CaffeSyncedMemory, TestGPUWrite) {
  SyncedMemory mem(10);
  void* gpu_data = mem.mutable_gpu_data();
  EXPECT_EQ(mem.head(), SyncedMemory::HEAD_AT_GPU);
  gpu_memset(gpu_data, 1, mem.size());
  const void* cpu_data = mem.cpu_data();
  for (std::size_t i = 0; i < mem.size(); ++i) EXPECT_EQ(static_cast<const char*>(cpu_data)[i], 1);
  EXPECT_EQ(mem.head(), SyncedMemory::SYNCED);

  gpu_data = mem.mutable_gpu_data();
  EXPECT_EQ(mem.head(), SyncedMemory::HEAD_AT_GPU);
  gpu_memset(gpu_data, 2, mem.size());
  cpu_data = mem.cpu_data();
  for (std::size_t i = 0; i < mem.size(); ++i) EXPECT_EQ(static_cast<const char*>(cpu_data)[i], 2);
  EXPECT_EQ(mem.head(), SyncedMemory::SYNCED);
}

// Caffe set head_ = SYNCED in async_gpu_push before the copy had run; a host
// write right after it raced with the copy.
TEST(CaffeSyncedMemory, AsyncGpuPushIsSyncedOnlyWhenTheCopyIsDone) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  test::scoped_emulated_delay delay{std::chrono::microseconds{100}};
  const std::size_t n = 1 << 16;
  SyncedMemory mem(n);
  std::memset(mem.mutable_cpu_data(), 3, n);
  stream s{compat::current()};
  test::stream_latch hold{s};
  mem.async_gpu_push(s);
  EXPECT_EQ(mem.head(), SyncedMemory::HEAD_AT_CPU);                            // Caffe said SYNCED here
  test::while_held(hold, [&] { std::memset(mem.mutable_cpu_data(), 4, n); });  // waits for the push
  EXPECT_EQ(mem.head(), SyncedMemory::HEAD_AT_CPU);
  EXPECT_EQ(gpu_read(mem.gpu_data(), n), std::vector<std::uint8_t>(n, 4));
  EXPECT_EQ(mem.head(), SyncedMemory::SYNCED);
  // Caffe's CHECK(head_ == HEAD_AT_CPU) becomes an exception.
  EXPECT_THROW(mem.async_gpu_push(s), logic_error);
}

TEST(CaffeSyncedMemory, AsyncGpuPushTakesACudaStream) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 1);
  SyncedMemory mem(64);
  std::memset(mem.mutable_cpu_data(), 5, 64);
  stream s{compat::current()};
  CUstream_st* raw = s.view().native_handle();  // what a cudaStream_t is
  mem.async_gpu_push(raw);
  s.synchronize();
  EXPECT_EQ(mem.head(), SyncedMemory::SYNCED);
}

TEST(CaffeSyncedMemory, SetCpuDataAndSetGpuDataBorrow) {
  std::vector<std::uint8_t> external(32, 9);
  SyncedMemory mem(32);
  mem.set_cpu_data(external.data());
  EXPECT_EQ(mem.head(), SyncedMemory::HEAD_AT_CPU);
  EXPECT_EQ(mem.cpu_data(), external.data());
  EXPECT_EQ(gpu_read(mem.gpu_data(), 32), external);
  EXPECT_THROW(mem.set_cpu_data(nullptr), logic_error);

  SyncedMemory other(32);
  void* gpu = other.mutable_gpu_data();
  gpu_memset(gpu, 7, 32);
  SyncedMemory borrower(32);
  borrower.set_gpu_data(gpu);
  EXPECT_EQ(borrower.head(), SyncedMemory::HEAD_AT_GPU);
  EXPECT_EQ(borrower.gpu_data(), gpu);
  EXPECT_EQ(std::vector<std::uint8_t>(static_cast<const std::uint8_t*>(borrower.cpu_data()),
                                      static_cast<const std::uint8_t*>(borrower.cpu_data()) + 32),
            std::vector<std::uint8_t>(32, 7));
}

// ---- test_blob.cpp ----------------------------------------------------------------

template <typename Dtype>
class CaffeBlob : public ::testing::Test {
 protected:
  CaffeBlob() : blob_(new Blob<Dtype>()), blob_preshaped_(new Blob<Dtype>(2, 3, 4, 5)) {}
  ~CaffeBlob() override {
    delete blob_;
    delete blob_preshaped_;
  }
  // Caffe's UniformFiller(-3, 3).
  static void fill_uniform(Blob<Dtype>* b) {
    std::uniform_real_distribution<Dtype> pick{-3, 3};
    Dtype* data = b->mutable_cpu_data();
    for (int i = 0; i < b->count(); ++i) data[i] = pick(test::rng());
  }
  Blob<Dtype>* const blob_;
  Blob<Dtype>* const blob_preshaped_;
};

using dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CaffeBlob, dtypes);

TYPED_TEST(CaffeBlob, TestInitialization) {
  EXPECT_TRUE(this->blob_);
  EXPECT_TRUE(this->blob_preshaped_);
  EXPECT_EQ(this->blob_preshaped_->num(), 2);
  EXPECT_EQ(this->blob_preshaped_->channels(), 3);
  EXPECT_EQ(this->blob_preshaped_->height(), 4);
  EXPECT_EQ(this->blob_preshaped_->width(), 5);
  EXPECT_EQ(this->blob_preshaped_->count(), 120);
  EXPECT_EQ(this->blob_->num_axes(), 0);
  EXPECT_EQ(this->blob_->count(), 0);
}

TYPED_TEST(CaffeBlob, TestPointersCPUGPU) {
  EXPECT_TRUE(this->blob_preshaped_->gpu_data());
  EXPECT_TRUE(this->blob_preshaped_->cpu_data());
  EXPECT_TRUE(this->blob_preshaped_->mutable_gpu_data());
  EXPECT_TRUE(this->blob_preshaped_->mutable_cpu_data());
}

TYPED_TEST(CaffeBlob, TestReshape) {
  this->blob_->Reshape(2, 3, 4, 5);
  EXPECT_EQ(this->blob_->num(), 2);
  EXPECT_EQ(this->blob_->channels(), 3);
  EXPECT_EQ(this->blob_->height(), 4);
  EXPECT_EQ(this->blob_->width(), 5);
  EXPECT_EQ(this->blob_->count(), 120);
}

TYPED_TEST(CaffeBlob, TestReshapeZero) {
  std::vector<int> shape(2);
  shape[0] = 0;
  shape[1] = 5;
  this->blob_->Reshape(shape);
  EXPECT_EQ(this->blob_->count(), 0);
}

TYPED_TEST(CaffeBlob, ReshapeKeepsTheDataPointerWithinCapacity) {
  this->blob_->Reshape(2, 3, 4, 5);
  const auto* data = this->blob_->cpu_data();
  this->blob_->Reshape(1, 3, 4, 5);
  EXPECT_EQ(this->blob_->cpu_data(), data);
  this->blob_->Reshape(2, 3, 4, 5);
  EXPECT_EQ(this->blob_->cpu_data(), data);
  this->blob_->Reshape(3, 3, 4, 5);
  EXPECT_EQ(this->blob_->count(), 180);
}

TYPED_TEST(CaffeBlob, ShapesAxesAndOffsets) {
  Blob<TypeParam> b(std::vector<int>{2, 3, 4, 5});
  EXPECT_EQ(b.shape_string(), "2 3 4 5 (120)");
  EXPECT_EQ(b.shape(-1), 5);
  EXPECT_EQ(b.CanonicalAxisIndex(-4), 0);
  EXPECT_EQ(b.count(1), 60);
  EXPECT_EQ(b.count(1, 3), 12);
  EXPECT_EQ(b.offset(1, 2, 3, 4), ((1 * 3 + 2) * 4 + 3) * 5 + 4);
  EXPECT_EQ(b.offset(std::vector<int>{1, 2, 3, 4}), b.offset(1, 2, 3, 4));
  EXPECT_THROW((void)b.shape(4), logic_error);
  EXPECT_THROW(b.Reshape(std::vector<int>(33, 1)), logic_error);
  EXPECT_THROW(b.Reshape(std::vector<int>{2, -1}), logic_error);
  EXPECT_THROW(b.Reshape(std::vector<int>{1 << 16, 1 << 16}), logic_error);  // count past int
  EXPECT_EQ(b.count(), 120);                                                 // unchanged
  const int* gpu_shape = b.gpu_shape();
  EXPECT_EQ(gpu_read(gpu_shape, 4 * sizeof(int)), gpu_read(std::vector<int>{2, 3, 4, 5}.data(), 4 * sizeof(int)));
}

TYPED_TEST(CaffeBlob, DataAtAndDiffAt) {
  Blob<TypeParam> b(2, 3, 4, 5);
  this->fill_uniform(&b);
  TypeParam* diff = b.mutable_cpu_diff();
  for (int i = 0; i < b.count(); ++i) diff[i] = static_cast<TypeParam>(i);
  EXPECT_EQ(b.data_at(1, 2, 3, 4), b.cpu_data()[b.count() - 1]);
  EXPECT_EQ(b.diff_at(1, 2, 3, 4), static_cast<TypeParam>(b.count() - 1));
  EXPECT_EQ(b.diff_at(std::vector<int>{0, 1, 0, 0}), static_cast<TypeParam>(20));
}

// Caffe's BlobMathTest, on the host and on the device (the side a mutable
// access moved the head to).
TYPED_TEST(CaffeBlob, TestSumOfSquaresAsumAndScale) {
  const TypeParam epsilon = sizeof(TypeParam) == 4 ? 1e-5F : 1e-12;
  for (bool on_device : {false, true}) {
    Blob<TypeParam> b(2, 3, 4, 5);
    EXPECT_EQ(b.sumsq_data(), 0);
    EXPECT_EQ(b.sumsq_diff(), 0);
    EXPECT_EQ(b.asum_data(), 0);
    this->fill_uniform(&b);
    TypeParam expected_sumsq = 0;
    TypeParam expected_asum = 0;
    const TypeParam* data = b.cpu_data();
    for (int i = 0; i < b.count(); ++i) {
      expected_sumsq += data[i] * data[i];
      expected_asum += std::fabs(data[i]);
    }
    if (on_device) {
      (void)b.mutable_gpu_data();
    } else {
      (void)b.mutable_cpu_data();
    }
    EXPECT_NEAR(expected_sumsq, b.sumsq_data(), epsilon * expected_sumsq);
    EXPECT_NEAR(expected_asum, b.asum_data(), epsilon * expected_asum);
    const TypeParam factor = 7;
    TypeParam* diff = b.mutable_cpu_diff();
    for (int i = 0; i < b.count(); ++i) diff[i] = b.cpu_data()[i] * factor;
    if (on_device) (void)b.mutable_gpu_diff();
    EXPECT_NEAR(expected_sumsq * factor * factor, b.sumsq_diff(), epsilon * expected_sumsq * factor * factor);
    EXPECT_NEAR(expected_asum * factor, b.asum_diff(), epsilon * expected_asum * factor);
    // scale_data on the side the head is at.
    const TypeParam scale = 0.25;
    b.scale_data(scale);
    EXPECT_NEAR(expected_asum * scale, b.asum_data(), epsilon * expected_asum);
    // Update: data -= diff.
    const std::vector<TypeParam> before(b.cpu_data(), b.cpu_data() + b.count());
    if (on_device) (void)b.mutable_gpu_data();
    b.Update();
    for (int i = 0; i < b.count(); ++i) {
      EXPECT_NEAR(b.cpu_data()[i], before[static_cast<std::size_t>(i)] - b.cpu_diff()[i], 1e-5);
    }
  }
}

TYPED_TEST(CaffeBlob, CopyFromChecksOrTakesTheShape) {
  Blob<TypeParam> source(2, 3, 4, 5);
  this->fill_uniform(&source);
  Blob<TypeParam> target(1, 1, 1, 1);
  try {
    target.CopyFrom(source);
    FAIL() << "did not throw";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("different sizes"));
  }
  target.CopyFrom(source, false, true);
  EXPECT_EQ(target.shape(), source.shape());
  for (int i = 0; i < source.count(); ++i) EXPECT_EQ(target.cpu_data()[i], source.cpu_data()[i]);
}

// Caffe bug #5439: after ShareData the capacity was stale, so a Reshape within
// the shared memory reallocated (and detached), or one past it wrote out of bounds.
TYPED_TEST(CaffeBlob, ShareDataKeepsTheCapacityRight) {
  Blob<TypeParam> big(4, 3, 4, 5);
  Blob<TypeParam> small(4, 3, 4, 5);
  this->fill_uniform(&big);
  small.ShareData(big);
  EXPECT_EQ(small.cpu_data(), big.cpu_data());
  small.Reshape(2, 3, 4, 5);  // within the shared memory: still shared
  EXPECT_EQ(small.cpu_data(), big.cpu_data());
  small.Reshape(8, 3, 4, 5);  // past it: new memory of its own, the other blob untouched
  EXPECT_NE(small.cpu_data(), big.cpu_data());
  EXPECT_EQ(big.count(), 240);
  Blob<TypeParam> mismatched(1, 1, 1, 1);
  EXPECT_THROW(mismatched.ShareData(big), logic_error);
  Blob<TypeParam> diffs(4, 3, 4, 5);
  diffs.ShareDiff(big);
  EXPECT_EQ(diffs.cpu_diff(), big.cpu_diff());
}

TYPED_TEST(CaffeBlob, DataReturnsTheSyncedMemoryUnderneath) {
  Blob<TypeParam> b(1, 2, 3, 4);
  (void)b.mutable_cpu_data();
  auto data = b.data();
  EXPECT_EQ(data->head(), SyncedMemory::HEAD_AT_CPU);
  EXPECT_EQ(data->cpu_data(), b.cpu_data());
  EXPECT_EQ(data->size(), 24 * sizeof(TypeParam));
  (void)b.mutable_gpu_data();
  EXPECT_EQ(data->head(), SyncedMemory::HEAD_AT_GPU);
}

TYPED_TEST(CaffeBlob, SetCpuDataBorrowsTheCallersArray) {
  Blob<TypeParam> b(2, 2, 2, 2);
  std::vector<TypeParam> external(16);
  for (std::size_t i = 0; i < external.size(); ++i) external[i] = static_cast<TypeParam>(i);
  b.set_cpu_data(external.data());
  EXPECT_EQ(b.cpu_data(), external.data());
  EXPECT_EQ(b.data_at(1, 1, 1, 1), 15);
  EXPECT_THROW(b.set_cpu_data(nullptr), logic_error);
}

}  // namespace
}  // namespace syncmem
