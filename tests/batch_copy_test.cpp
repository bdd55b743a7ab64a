// ctest-labels: threaded
// The batched copy: every kind of memory in one batch, every byte with fresh
// random data, odd sizes, ranges end to end, overlapping ranges refused,
// zero-length entries, staging that runs out in the middle (nothing copied),
// rounds of downloads through the staging, uploads through a ring of staging
// buffers smaller than the batch, small uploads through device scratch (and
// without it when the device is out of memory), ordering on the stream,
// emulated delays.
#include "syncmem/batch_copy.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "device_ops.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/graph.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "syncmem/mr/failure_adaptor.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "syncmem/mr/registered_memory.hpp"
#include "syncmem/mr/statistics_adaptor.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"
#include "transfer/copy_internal.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {
namespace {

using bytes_t = std::vector<std::uint8_t>;
enum class mem { pageable, pinned, device };
constexpr mem all_mems[] = {mem::pageable, mem::pinned, mem::device};

// 0 .. n-1 in a fresh random order: slot i of the sources goes to slot
// shuffled[i] of the destinations, so that no two copies lie end to end on both sides.
std::vector<std::size_t> shuffled(std::size_t n) {
  std::vector<std::size_t> slots(n);
  for (std::size_t i = 0; i < n; ++i) slots[i] = i;
  std::shuffle(slots.begin(), slots.end(), rng());
  return slots;
}

// One allocation of a kind, filled and read without the batch.
class region {
 public:
  region(mem m, device_id d, std::size_t size) : mem_{m}, device_{d}, size_{size} {
    device_guard guard{d};
    auto& backend = detail::backend_for(d);
    switch (m) {
      case mem::pageable:
        pageable_ = std::make_unique<std::uint8_t[]>(size);
        p_ = pageable_.get();
        break;
      case mem::pinned:
        p_ = static_cast<std::uint8_t*>(backend.allocate_pinned(size, 0));
        break;
      case mem::device:
        p_ = static_cast<std::uint8_t*>(backend.allocate(d.index(), size));
        break;
    }
  }
  ~region() {
    device_guard guard{device_};
    auto& backend = detail::backend_for(device_);
    synchronize_device(device_);
    if (mem_ == mem::pinned) backend.deallocate_pinned(p_, size_);
    if (mem_ == mem::device) backend.deallocate(device_.index(), p_, size_);
  }
  region(const region&) = delete;
  region& operator=(const region&) = delete;

  [[nodiscard]] std::uint8_t* data() const { return p_; }
  void write(const bytes_t& b) {
    if (mem_ == mem::device) {
      syncmem::copy(p_, b.data(), b.size(), default_stream(device_));
    } else {
      std::memcpy(p_, b.data(), b.size());
    }
  }
  [[nodiscard]] bytes_t read() const {
    if (mem_ == mem::device) return read_device(default_stream(device_), p_, size_);
    return {p_, p_ + size_};
  }

 private:
  mem mem_;
  device_id device_;
  std::size_t size_;
  std::unique_ptr<std::uint8_t[]> pageable_;
  std::uint8_t* p_ = nullptr;
};

// Copies of random odd sizes between every pair of kinds, at random offsets
// of one region per kind and side, with zero-length entries among them; the
// expected contents of every destination region, byte for byte.
struct batch_case {
  std::vector<std::unique_ptr<region>> sources, destinations;
  std::vector<bytes_t> source_bytes, expected;
  std::vector<copy_request> requests;
};

batch_case make_case(device_id d, std::size_t copies_per_pair, std::size_t largest) {
  batch_case c;
  const std::size_t region_bytes = copies_per_pair * 3 * (largest + 64) + 4096;
  for (const mem m : all_mems) {
    c.sources.push_back(std::make_unique<region>(m, d, region_bytes));
    c.destinations.push_back(std::make_unique<region>(m, d, region_bytes));
    c.source_bytes.push_back(random_bytes(region_bytes));
    c.expected.push_back(random_bytes(region_bytes));  // what the destination holds before
    c.sources.back()->write(c.source_bytes.back());
    c.destinations.back()->write(c.expected.back());
  }
  std::vector<std::size_t> dst_at(3, 0);
  for (std::size_t from = 0; from < 3; ++from) {
    for (std::size_t to = 0; to < 3; ++to) {
      for (std::size_t k = 0; k < copies_per_pair; ++k) {
        const std::size_t n = 1 + rng()() % largest;
        const std::size_t src_at = rng()() % (region_bytes - n);
        const std::size_t gap = rng()() % 64;  // apart, or end to end (gap 0)
        const std::size_t at = dst_at[to] + (gap < 16 ? 0 : gap);
        c.requests.push_back({c.destinations[to]->data() + at, c.sources[from]->data() + src_at, n});
        std::memcpy(c.expected[to].data() + at, c.source_bytes[from].data() + src_at, n);
        dst_at[to] = at + n;
        if (rng()() % 4 == 0) c.requests.push_back({nullptr, nullptr, 0});  // skipped, whatever its pointers
      }
    }
  }
  std::shuffle(c.requests.begin(), c.requests.end(), rng());
  return c;
}

void expect_done(const batch_case& c) {
  for (std::size_t i = 0; i < c.destinations.size(); ++i) {
    EXPECT_EQ(c.destinations[i]->read(), c.expected[i]) << "destination region " << i;
  }
}

template <class Kind>
class BatchCopy : public device_test<Kind> {};
TYPED_TEST_SUITE(BatchCopy, device_kinds, device_kind_names);

TYPED_TEST(BatchCopy, EveryKindPairInOneBatchEveryByte) {
  stream s{this->dev()};
  for (const std::size_t largest : {std::size_t{9}, std::size_t{4099}, std::size_t{300} << 10}) {
    batch_case c = make_case(this->dev(), 7, largest);
    const transfer t = copy_async(c.requests, s);
    t.wait();
    SCOPED_TRACE(::testing::Message() << "largest " << largest << ", path " << to_string(t.path()));
    expect_done(c);
  }
}

// The copy kernel (copy_options::batch_kernel_max_copy) and the DMA engines
// leave the same bytes: more copies than one launch carries, sizes across its
// 16 KiB tiles, sources at the same and at other offsets modulo 16 as their
// destinations (those go to the DMA engines), every kind pair.
TYPED_TEST(BatchCopy, CopyKernelAndDmaAgreeEveryByte) {
  stream s{this->dev()};
  for (const std::size_t kernel_max : {std::size_t{256} << 10, std::size_t{0}, std::size_t{5000}}) {
    copy_options o = get_copy_options();
    o.batch_kernel_max_copy = kernel_max;
    batch_case c = make_case(this->dev(), 40, 70000);
    const transfer t = copy_async(c.requests, s, o);
    t.wait();
    SCOPED_TRACE(::testing::Message() << "batch_kernel_max_copy " << kernel_max << ", path " << to_string(t.path()));
    expect_done(c);
  }
}

// Copies between pinned and device memory at the same offset modulo 16 all go
// through the copy kernel on CUDA: the path says so, and says batch (or
// batch_loop) when the kernel is off or the device has none.
TYPED_TEST(BatchCopy, CopyKernelPathAndBytes) {
  stream s{this->dev()};
  const std::size_t count = 333, bytes = 777, stride = 800;  // stride a multiple of 16: offsets alike
  region pinned{mem::pinned, this->dev(), count * stride}, dev{mem::device, this->dev(), count * stride};
  region back{mem::pinned, this->dev(), count * stride};
  const bytes_t source = random_bytes(count * stride), before = random_bytes(count * stride);
  pinned.write(source);
  dev.write(random_bytes(count * stride));
  back.write(before);
  std::vector<copy_request> up, down;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t j = (i * 101) % count;  // not end to end: nothing coalesces
    up.push_back({dev.data() + j * stride + 3, pinned.data() + i * stride + 3, bytes});
    down.push_back({back.data() + i * stride + 3, dev.data() + j * stride + 3, bytes});
  }
  for (const std::size_t kernel_max : {std::size_t{4096}, std::size_t{0}}) {
    copy_options o = get_copy_options();
    o.batch_kernel_max_copy = kernel_max;
    const transfer t_up = copy_async(up, s, o);
    const transfer t_down = copy_async(down, s, o);
    t_down.wait();
    bytes_t expected = before;
    for (std::size_t i = 0; i < count; ++i) {
      std::copy_n(source.begin() + static_cast<std::ptrdiff_t>(i * stride + 3), bytes,
                  expected.begin() + static_cast<std::ptrdiff_t>(i * stride + 3));
    }
    EXPECT_EQ(back.read(), expected) << "batch_kernel_max_copy " << kernel_max;
    // (CUDA devices with unified addressing reach pinned memory by its host
    // pointer; emulated devices have no copy kernel.)
    if (this->is_cuda() && kernel_max > 0) {
      EXPECT_EQ(t_up.path(), copy_path::batch_kernel);
      EXPECT_EQ(t_down.path(), copy_path::batch_kernel);
    } else {
      EXPECT_NE(t_up.path(), copy_path::batch_kernel);
      EXPECT_NE(t_down.path(), copy_path::batch_kernel);
    }
    back.write(before);
  }
}

// Small downloads from the device to pageable memory, at every offset modulo
// 16 on both sides and more of them than one group holds: on CUDA the copy
// kernel gathers them into the pinned staging (the path says so), with a
// large one among them the DMA engines take that one; with the kernel off, or
// on emulated devices, the DMA engines take them all. Every byte, and the
// bytes between them untouched.
TYPED_TEST(BatchCopy, SmallDownloadsToPageableGatheredByTheKernelEveryByte) {
  stream s{this->dev()};
  const std::size_t count = 700, stride = 24 << 10, large = 300 << 10;
  region dev{mem::device, this->dev(), count * stride + large};
  region back{mem::pageable, this->dev(), count * stride + large};
  const bytes_t source = random_bytes(count * stride + large);
  dev.write(source);
  std::uniform_int_distribution<std::size_t> size{1, 20 << 10}, skew{0, 63};
  std::vector<copy_request> down;
  std::vector<std::size_t> from(count), to(count), bytes(count);
  for (std::size_t i = 0; i < count; ++i) {
    from[i] = (i * 101) % count * stride + skew(rng());  // not end to end: nothing coalesces
    to[i] = i * stride + skew(rng());
    bytes[i] = size(rng());
    down.push_back({back.data() + to[i], dev.data() + from[i], bytes[i]});
  }
  for (const bool with_large : {false, true}) {
    for (const std::size_t kernel_max : {std::size_t{256} << 10, std::size_t{0}}) {
      copy_options o = get_copy_options();
      o.batch_kernel_max_copy = kernel_max;
      const bytes_t before = random_bytes(count * stride + large);
      back.write(before);
      bytes_t expected = before;
      for (std::size_t i = 0; i < count; ++i) {
        std::copy_n(source.begin() + static_cast<std::ptrdiff_t>(from[i]), bytes[i],
                    expected.begin() + static_cast<std::ptrdiff_t>(to[i]));
      }
      std::vector<copy_request> requests = down;
      if (with_large) {
        requests.push_back({back.data() + count * stride + 3, dev.data() + count * stride + 5, large - 8});
        std::copy_n(source.begin() + static_cast<std::ptrdiff_t>(count * stride + 5), large - 8,
                    expected.begin() + static_cast<std::ptrdiff_t>(count * stride + 3));
      }
      const transfer t = copy_async(requests, s, o);
      SCOPED_TRACE(::testing::Message() << "batch_kernel_max_copy " << kernel_max << ", large " << with_large
                                        << ", path " << to_string(t.path()));
      EXPECT_EQ(back.read(), expected) << "copies to pageable memory are complete at return";
      t.wait();
      if (this->is_cuda() && kernel_max > 0) {
        EXPECT_EQ(t.path(), with_large ? copy_path::batch : copy_path::batch_kernel);
      } else {
        EXPECT_NE(t.path(), copy_path::batch_kernel);
      }
    }
  }
}

// A download the kernel may make sits at its source's offset modulo 16 in
// the staging block, up to 15 bytes past a whole max_chunk: the block holds
// one of max_chunk bytes even when max_chunk is as large as the block.
TYPED_TEST(BatchCopy, KernelDownloadOfAWholeLargeChunkFitsTheBlock) {
  stream s{this->dev()};
  const std::size_t big = max_batch_staging, small = 5000, size = big + (8 << 10);
  region dev{mem::device, this->dev(), size}, back{mem::pageable, this->dev(), size};
  const bytes_t source = random_bytes(size), before = random_bytes(size);
  dev.write(source);
  back.write(before);
  copy_options o = get_copy_options();
  o.max_chunk = big;
  o.batch_kernel_max_copy = big;
  const std::vector<copy_request> requests{{back.data(), dev.data() + 15, big},
                                           {back.data() + big + 100, dev.data() + big + 200, small}};
  copy_async(requests, s, o).wait();
  bytes_t expected = before;
  std::copy_n(source.begin() + 15, big, expected.begin());
  std::copy_n(source.begin() + static_cast<std::ptrdiff_t>(big + 200), small,
              expected.begin() + static_cast<std::ptrdiff_t>(big + 100));
  EXPECT_EQ(back.read(), expected);
}

TYPED_TEST(BatchCopy, EmulatedDelaysChangeNothing) {
  if (this->is_cuda()) GTEST_SKIP() << "emulated devices only";
  scoped_emulated_delay delay{std::chrono::microseconds{300}};
  stream s{this->dev()};
  batch_case c = make_case(this->dev(), 5, 70000);
  copy(c.requests, s);
  expect_done(c);
}

TYPED_TEST(BatchCopy, EndToEndRangesAreRight) {
  stream s{this->dev()};
  for (const mem from : all_mems) {
    for (const mem to : all_mems) {
      const std::size_t pieces = 37, piece = 1000 + rng()() % 3000;
      region src{from, this->dev(), pieces * piece}, dst{to, this->dev(), pieces * piece};
      const bytes_t source = random_bytes(pieces * piece);
      src.write(source);
      dst.write(random_bytes(pieces * piece));
      std::vector<copy_request> requests;
      for (std::size_t i = 0; i < pieces; ++i) {
        requests.push_back({dst.data() + i * piece, src.data() + i * piece, piece});
      }
      copy(requests, s);
      EXPECT_EQ(dst.read(), source) << "from " << static_cast<int>(from) << " to " << static_cast<int>(to);
    }
  }
}

TYPED_TEST(BatchCopy, OverlapIsRefusedAndNothingIsCopied) {
  stream s{this->dev()};
  for (const mem m : all_mems) {
    region src{m, this->dev(), 8192}, dst{m, this->dev(), 8192};
    const bytes_t before = random_bytes(8192);
    dst.write(before);
    src.write(random_bytes(8192));
    // Two destinations overlapping by one byte.
    const std::vector<copy_request> two_dsts{
        {dst.data(), src.data(), 100}, {dst.data() + 2000, src.data(), 10}, {dst.data() + 99, src.data() + 500, 7}};
    EXPECT_THAT(error_of([&] { return copy_async(two_dsts, s); }), HasSubstr("overlaps the destination of copy"));
    // A destination that another copy reads.
    const std::vector<copy_request> reads_dst{{dst.data(), src.data(), 100}, {src.data() + 4000, dst.data() + 50, 10}};
    EXPECT_THAT(error_of([&] { return copy_async(reads_dst, s); }), HasSubstr("overlaps the source of copy"));
    synchronize_device(this->dev());
    EXPECT_EQ(dst.read(), before) << "a refused batch wrote its destination";
  }
}

TYPED_TEST(BatchCopy, BadEntryIsNamedAndNothingIsCopied) {
  stream s{this->dev()};
  region src{mem::pinned, this->dev(), 4096}, dst{mem::device, this->dev(), 4096};
  const bytes_t before = random_bytes(4096);
  dst.write(before);
  const std::vector<copy_request> null_src{{dst.data(), src.data(), 10}, {dst.data() + 100, nullptr, 10}};
  EXPECT_THAT(error_of([&] { return copy_async(null_src, s); }), HasSubstr("source of copy 1 is null"));
  const std::vector<copy_request> past_end{{dst.data(), src.data(), 10}, {dst.data() + 4000, src.data(), 200}};
  EXPECT_THAT(error_of([&] { return copy_async(past_end, s); }), HasSubstr("copy 1 of the batch"));
  EXPECT_EQ(dst.read(), before);
}

TYPED_TEST(BatchCopy, ZeroLengthEntriesAlone) {
  stream s{this->dev()};
  const std::vector<copy_request> none{{nullptr, nullptr, 0}, {nullptr, nullptr, 0}};
  const transfer t = copy_async(none, s);
  EXPECT_TRUE(t.ready());
  EXPECT_EQ(t.path(), copy_path::none);
  EXPECT_TRUE(copy_async(std::span<const copy_request>{}, s).ready());
}

// The staging is taken before anything is enqueued: when it cannot be had,
// the batch throws and no destination is written, not even those the batch
// would have copied without staging.
TYPED_TEST(BatchCopy, StagingFailureCopiesNothing) {
  stream s{this->dev()};
  mr::pinned_resource pinned{this->kind};
  mr::failure_adaptor failing{pinned, mr::failure_adaptor::always()};
  mr::caching_pinned_options staging_options;
  staging_options.fallback_to_pageable = false;
  mr::caching_pinned_resource staging{failing, staging_options};
  copy_options o = get_copy_options();
  o.staging = &staging;
  batch_case c = make_case(this->dev(), 4, 5000);
  std::vector<bytes_t> before;
  for (const auto& r : c.destinations) before.push_back(r->read());
  EXPECT_THROW((void)copy_async(c.requests, s, o), std::bad_alloc);
  synchronize_device(this->dev());
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(c.destinations[i]->read(), before[i]) << "a failed batch wrote destination region " << i;
  }
  EXPECT_GT(failing.failures(), 0U);
}

// More pageable bytes than one staging block holds: the downloads go through
// it in rounds, the uploads through the ring of staging buffers in one pass,
// which, larger than staging_thresholds::ordinary_stores_above, gathers its
// middle with ordinary stores and demotes its last ranges (counted once).
TYPED_TEST(BatchCopy, MoreThanOneStagingBlock) {
  stream s{this->dev()};
  const std::size_t piece = (std::size_t{1} << 20) + 13, pieces = max_batch_staging / piece + 6;
  region host{mem::pageable, this->dev(), pieces * piece}, dev{mem::device, this->dev(), pieces * piece};
  region back{mem::pageable, this->dev(), pieces * piece};
  const bytes_t source = random_bytes(pieces * piece);
  host.write(source);
  std::vector<copy_request> up, down;
  for (std::size_t i = 0; i < pieces; ++i) {
    const std::size_t j = (i * 5) % pieces;  // not end to end
    up.push_back({dev.data() + j * piece, host.data() + i * piece, piece});
    down.push_back({back.data() + i * piece, dev.data() + j * piece, piece});
  }
  const auto ordinary_before = detail::ordinary_store_upload_count();
  copy(up, s);
  EXPECT_EQ(detail::ordinary_store_upload_count() - ordinary_before, 1U);
  copy(down, s);
  EXPECT_EQ(back.read(), source);
}

// Small uploads from pageable memory (up to 16 KiB), at every offset modulo
// 16 on both sides and more than the scratch holds: they go up a group per DMA
// into device scratch memory (one allocation from the device's resource,
// given back) and the copy kernel scatters them, every byte in place; larger
// ones, small ones that are less than half the bytes, or any with the kernel
// off (batch_kernel_max_copy 0), take nothing from the device's resource.
class scratch_case {
 public:
  explicit scratch_case(device_id d)
      : device_{d},
        counted_{mr::get_per_device_resource(d)},
        failing_{counted_},
        previous_{mr::set_per_device_resource(d, &failing_)} {}
  ~scratch_case() { mr::set_per_device_resource(device_, previous_); }
  scratch_case(const scratch_case&) = delete;
  scratch_case& operator=(const scratch_case&) = delete;

  // Uploads `pieces` pageable ranges of up to `largest` bytes and checks every byte of the destination.
  // With `large` > 0, one more upload of that many bytes goes in the same batch.
  void upload_and_check(std::size_t pieces, std::size_t largest, const copy_options& o, std::size_t large = 0) {
    stream s{device_};
    const std::size_t region_bytes = pieces * (largest + 32) + large;
    region host{mem::pageable, device_, region_bytes}, dev{mem::device, device_, region_bytes};
    const bytes_t source = random_bytes(region_bytes);
    bytes_t expected = random_bytes(region_bytes);
    host.write(source);
    dev.write(expected);
    const auto slots = shuffled(pieces);
    std::vector<copy_request> requests;
    for (std::size_t i = 0; i < pieces; ++i) {
      const std::size_t n = largest - rng()() % (largest / 2);
      const std::size_t src_at = i * (largest + 32) + rng()() % 16;
      const std::size_t dst_at = slots[i] * (largest + 32) + rng()() % 16;
      requests.push_back({dev.data() + dst_at, host.data() + src_at, n});
      std::memcpy(expected.data() + dst_at, source.data() + src_at, n);
    }
    if (large > 0) {
      const std::size_t at = pieces * (largest + 32);
      requests.insert(requests.begin() + static_cast<std::ptrdiff_t>(pieces / 2),
                      copy_request{dev.data() + at, host.data() + at, large});
      std::memcpy(expected.data() + at, source.data() + at, large);
    }
    copy(requests, s, o);
    EXPECT_EQ(dev.read(), expected) << pieces << " uploads of up to " << largest << " bytes";
  }

  [[nodiscard]] mr::resource_statistics statistics() const { return counted_.statistics(); }
  mr::failure_adaptor& failing() { return failing_; }

 private:
  device_id device_;
  mr::statistics_adaptor counted_;
  mr::failure_adaptor failing_;
  mr::memory_resource* previous_;
};

TYPED_TEST(BatchCopy, SmallUploadsGoUpThroughDeviceScratchEveryByte) {
  scratch_case c{this->dev()};
  const copy_options o = get_copy_options();
  c.upload_and_check(300, 16 << 10, o);
  EXPECT_EQ(c.statistics().allocations.total, 1) << "the scratch";
  // More than the scratch holds (max_batch_staging): one scratch, used again
  // once the kernels that read it have been submitted.
  c.upload_and_check(max_batch_staging / (12 << 10) + 20, 16 << 10, o);
  synchronize_device(this->dev());
  EXPECT_EQ(c.statistics().allocations.total, 2) << "one scratch for the batch";
  EXPECT_EQ(c.statistics().allocations.current, 0) << "the scratch is given back";

  // Larger uploads, small ones that are less than half the bytes uploaded, or
  // the copy kernel off: one DMA each, no scratch.
  c.upload_and_check(300, 64 << 10, o);
  c.upload_and_check(300, 16 << 10, o, std::size_t{8} << 20);
  copy_options engines = o;
  engines.batch_kernel_max_copy = 0;
  c.upload_and_check(300, 16 << 10, engines);
  EXPECT_EQ(c.statistics().allocations.total, 2) << "no scratch for those";
  // Small ones that are most of the bytes, with a large one among them: scratch, every byte in place.
  c.upload_and_check(300, 16 << 10, o, std::size_t{1} << 20);
  EXPECT_EQ(c.statistics().allocations.total, 3);
}

TYPED_TEST(BatchCopy, SmallUploadsWithoutDeviceScratchGoOneDmaEach) {
  scratch_case c{this->dev()};
  c.failing().set_predicate(mr::failure_adaptor::always());
  c.upload_and_check(300, 16 << 10, get_copy_options());
  EXPECT_EQ(c.failing().failures(), 1U) << "the scratch was asked for once";
}

// Uploads of a batch through a ring of staging buffers smaller than the batch:
// many more groups than copy_options::staging_buffers (small chunks), rings of
// one buffer and more, small ranges (up through the device scratch where they
// are most of the bytes, one DMA each where they are not) mixed with larger
// ones cut into several groups, odd sizes at every offset modulo 16 on both
// sides, every byte with fresh random data. The ring takes no more pinned memory than its buffers of max_chunk
// bytes (and a cache line). Emulated devices delay their operations, so that
// the host threads come back to a buffer while the DMA reading it may still
// be queued.
TYPED_TEST(BatchCopy, UploadsThroughARingSmallerThanTheBatchEveryByte) {
  std::optional<scoped_emulated_delay> delay;
  if (!this->is_cuda()) delay.emplace(std::chrono::microseconds{100});
  scratch_case scratch{this->dev()};
  stream s{this->dev()};
  const std::size_t pieces = 160, largest = 150 << 10, stride = largest + 32;
  region host{mem::pageable, this->dev(), pieces * stride}, dev{mem::device, this->dev(), pieces * stride};
  for (const int buffers : {1, 2, 3, 8}) {
    for (const std::size_t large_every : {std::size_t{4}, std::size_t{40}}) {
      mr::pinned_resource pinned{this->kind};
      mr::statistics_adaptor counted{pinned};
      mr::caching_pinned_resource staging{counted};
      copy_options o = get_copy_options();
      o.staging = &staging;
      o.staging_buffers = buffers;
      o.min_chunk = 4 << 10;
      o.max_chunk = 40 << 10;
      const bytes_t source = random_bytes(pieces * stride);
      bytes_t expected = random_bytes(pieces * stride);
      host.write(source);
      dev.write(expected);
      const auto slots = shuffled(pieces);
      std::vector<copy_request> requests;
      for (std::size_t i = 0; i < pieces; ++i) {
        const bool large = i % large_every == large_every / 2;
        const std::size_t n = large ? (16 << 10) + 1 + rng()() % (largest - (16 << 10) - 16) : 1 + rng()() % (16 << 10);
        const std::size_t src_at = i * stride + rng()() % 16;
        const std::size_t dst_at = slots[i] * stride + rng()() % 16;
        requests.push_back({dev.data() + dst_at, host.data() + src_at, n});
        std::memcpy(expected.data() + dst_at, source.data() + src_at, n);
      }
      const auto scratches_before = scratch.statistics().allocations.total;
      copy(requests, s, o);
      SCOPED_TRACE(::testing::Message() << buffers << " buffers, one large range in " << large_every);
      EXPECT_EQ(dev.read(), expected);
      EXPECT_EQ(scratch.statistics().allocations.total, scratches_before + (large_every == 40 ? 1 : 0))
          << "the scratch, taken where the small ranges are most of the bytes";
      const auto ring = static_cast<std::size_t>(buffers) * (o.max_chunk + 64);
      EXPECT_LE(static_cast<std::size_t>(counted.statistics().bytes.peak),
                mr::caching_pinned_resource::block_size(ring));
    }
  }
}

// (a) through the ring: uploads of more groups than buffers, enqueued while
// the stream is held before work that changes every byte of their
// destination's allocation, land after that work: the bytes between them
// show the work, theirs show their sources.
TYPED_TEST(BatchCopy, UploadsThroughTheRingFollowHeldWork) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream s{this->dev()};
  copy_options o = get_copy_options();
  o.staging_buffers = 2;
  o.min_chunk = 4 << 10;
  o.max_chunk = 16 << 10;
  const std::size_t pieces = 40, piece = 9007, stride = piece + 100;
  region host{mem::pageable, this->dev(), pieces * stride}, dev{mem::device, this->dev(), pieces * stride};
  const bytes_t source = random_bytes(pieces * stride), before = random_bytes(pieces * stride);
  host.write(source);
  dev.write(before);
  bytes_t expected = before;
  for (auto& b : expected) b = static_cast<std::uint8_t>(b + 1);
  std::vector<copy_request> requests;
  for (std::size_t i = 0; i < pieces; ++i) {
    const std::size_t j = (i * 7) % pieces;  // not end to end
    requests.push_back({dev.data() + j * stride, host.data() + i * stride, piece});
    std::memcpy(expected.data() + j * stride, source.data() + i * stride, piece);
  }
  stream_latch hold{s};
  device_add_bytes(s, dev.data(), pieces * stride, 1);
  while_held(hold, [&] {
    copy(requests, s, o);
    return 0;
  });
  EXPECT_EQ(dev.read(), expected);
}

// (a): the batch reads after the work enqueued before it, and a download to
// pinned memory returns without waiting for it.
TYPED_TEST(BatchCopy, OrderedAfterEarlierWorkOnTheStream) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream s{this->dev()};
  const std::size_t n = 5000;
  region dev{mem::device, this->dev(), 3 * n}, pinned{mem::pinned, this->dev(), 3 * n};
  region pageable{mem::pageable, this->dev(), n};
  const bytes_t source = random_bytes(3 * n);
  dev.write(source);
  const std::vector<copy_request> to_pinned{{pinned.data(), dev.data() + n, n}, {pinned.data() + n, dev.data(), n}};
  std::optional<transfer> t;
  {
    stream_latch hold{s};
    device_add_bytes(s, dev.data(), 3 * n, 1);
    t = copy_async(to_pinned, s);
    EXPECT_FALSE(t->ready());
  }
  t->wait();
  bytes_t expected(source.begin(), source.end());
  for (auto& b : expected) b = static_cast<std::uint8_t>(b + 1);
  const bytes_t got = pinned.read();
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + n, expected.begin() + n));
  EXPECT_TRUE(std::equal(got.begin() + n, got.begin() + 2 * n, expected.begin()));
  // A download to pageable memory is complete at return, after the held work.
  stream_latch hold{s};
  device_add_bytes(s, dev.data(), n, 1);
  const std::vector<copy_request> to_pageable{{pageable.data(), dev.data(), n}};
  while_held(hold, [&] {
    copy(to_pageable, s);
    return 0;
  });
  const bytes_t down = pageable.read();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(down[i], static_cast<std::uint8_t>(source[i] + 2)) << i;
}

// With the copy kernel off: one submission where the runtime has the batch
// API (not on the legacy default stream, which it refuses); a loop on
// emulated devices.
TYPED_TEST(BatchCopy, PathSaysHowTheCopiesWent) {
  stream s{this->dev()};
  region src{mem::pinned, this->dev(), 4096}, dst{mem::device, this->dev(), 4096};
  const std::vector<copy_request> requests{{dst.data(), src.data(), 10}, {dst.data() + 100, src.data() + 50, 10}};
  copy_options dma = get_copy_options();
  dma.batch_kernel_max_copy = 0;
  const transfer t = copy_async(requests, s, dma);
  t.wait();
  if (!this->is_cuda()) {
    EXPECT_EQ(t.path(), copy_path::batch_loop);
  } else if (detail::cuda_runtime_version() >= 12080 && detail::cuda_driver_version() >= 12080) {
    EXPECT_EQ(t.path(), copy_path::batch);
  }
  EXPECT_EQ(copy_async(requests, default_stream(this->dev()), dma).path(), copy_path::batch_loop);
}

// Captures what `enqueue` puts on `s`, calls `before_launch`, then launches
// the graph on `s` and waits for it; the capture is ended when `enqueue`
// throws, and the exception goes on. CUDA devices keep the test's own
// relaxed-mode capture, which lets the engine ask the driver about pointers.
void capture_and_launch(stream_view s, const std::function<void()>& enqueue,
                        const std::function<void()>& before_launch) {
  if (s.device().kind() == device_kind::cuda) return cuda_ops::capture_and_launch(s, enqueue, before_launch);
  begin_capture(s);
  try {
    enqueue();
  } catch (...) {
    (void)end_capture(s);
    throw;
  }
  const graph g = end_capture(s);
  before_launch();
  g.launch(s);
  s.synchronize();
}

// Under stream capture each copy becomes a graph node of its own (the batch
// API cannot be captured): nothing is copied before the launch, every byte
// after it. A copy that needs the engine's host threads is refused before
// anything is captured.
TYPED_TEST(BatchCopy, CapturedIntoAGraphCopyByCopy) {
  stream s{this->dev()};
  const std::size_t n = 3001;
  region pinned{mem::pinned, this->dev(), 2 * n}, dev{mem::device, this->dev(), 2 * n};
  region back{mem::pinned, this->dev(), 2 * n}, pageable{mem::pageable, this->dev(), n};
  const bytes_t source = random_bytes(2 * n), back_before = random_bytes(2 * n);
  pinned.write(source);
  dev.write(random_bytes(2 * n));
  back.write(back_before);
  const std::vector<copy_request> up{{dev.data() + n, pinned.data(), n}, {dev.data(), pinned.data() + n, n}};
  const std::vector<copy_request> down{{back.data(), dev.data(), n}, {back.data() + n, dev.data() + n, n}};
  std::optional<transfer> t;
  capture_and_launch(
      s,
      [&] {
        t = copy_async(up, s);
        copy(down, s);  // ready at once: nothing to wait for before the launch
      },
      [&] { EXPECT_EQ(back.read(), back_before) << "a captured batch copied before the graph was launched"; });
  EXPECT_TRUE(t->ready());
  EXPECT_EQ(t->path(), copy_path::batch_loop);
  bytes_t expected(source.begin() + n, source.end());
  expected.insert(expected.end(), source.begin(), source.begin() + n);
  EXPECT_EQ(back.read(), expected);

  const std::vector<copy_request> from_pageable{{dev.data(), pinned.data(), 10},
                                                {dev.data() + 100, pageable.data(), 10}};
  std::string message = "no error";
  try {
    capture_and_launch(
        s, [&] { (void)copy_async(from_pageable, s); }, [] {});
  } catch (const unsupported_error& e) {
    message = e.what();
  }
  EXPECT_THAT(message, HasSubstr("copy 1 (10 bytes, pageable to device) cannot be captured"));
}

// A batch asks the driver about its pointers in relaxed capture mode, set
// once for all of them: afterwards the thread's own mode is as it was, also
// where the batch threw on its way through them.
TYPED_TEST(BatchCopy, LeavesTheThreadsCaptureModeAsItWas) {
  if (!this->is_cuda()) GTEST_SKIP() << "capture modes are CUDA's";
  stream s{this->dev()};
  const std::size_t n = 4099;
  region pageable{mem::pageable, this->dev(), 2 * n}, dev{mem::device, this->dev(), 2 * n};
  const bytes_t source = random_bytes(2 * n);
  pageable.write(source);
  dev.write(random_bytes(2 * n));
  const int before = cuda_ops::exchange_capture_mode(cuda_ops::capture_mode_thread_local);
  copy(std::vector<copy_request>{{dev.data() + n, pageable.data(), n}, {dev.data(), pageable.data() + n, n}}, s);
  const std::vector<copy_request> null_src{{dev.data(), pageable.data(), n}, {dev.data() + n, nullptr, n}};
  const std::string message = error_of([&] { return copy_async(null_src, s); });
  const int after = cuda_ops::exchange_capture_mode(before);
  EXPECT_EQ(after, cuda_ops::capture_mode_thread_local);
  EXPECT_THAT(message, HasSubstr("source of copy 1 is null"));
  bytes_t expected(source.begin() + static_cast<std::ptrdiff_t>(n), source.end());
  expected.insert(expected.end(), source.begin(), source.begin() + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(dev.read(), expected);
}

// The batch takes a pointer in the same 2 MiB window as one the driver called
// pageable for pageable too: registered memory there, after pageable memory
// in the batch, goes through the staging, and every byte still arrives, both ways.
TYPED_TEST(BatchCopy, RegisteredMemoryBesidePageableEveryByte) {
  if (!this->is_cuda()) GTEST_SKIP() << "registered memory is CUDA's";
  stream s{this->dev()};
  constexpr std::size_t window = std::size_t{2} << 20, half = window / 2;
  const std::unique_ptr<std::uint8_t, decltype(&std::free)> block{
      static_cast<std::uint8_t*>(std::aligned_alloc(window, window)), &std::free};
  ASSERT_NE(block, nullptr);
  std::uint8_t* host = block.get();
  const bytes_t host_before = random_bytes(window);
  std::memcpy(host, host_before.data(), window);
  const mr::registered_memory registered{host + half, half, device_kind::cuda};
  ASSERT_EQ(get_pointer_attributes(host + half).kind, memory_kind::pinned_host);
  ASSERT_EQ(get_pointer_attributes(host).kind, memory_kind::pageable_host);
  const std::size_t n = 40'009;
  region dev{mem::device, this->dev(), 4 * n};
  const bytes_t dev_before = random_bytes(4 * n);
  dev.write(dev_before);
  // Pageable first, then registered, in each direction; sources and destinations apart.
  const std::vector<copy_request> requests{{dev.data(), host + 13, n},
                                           {dev.data() + n, host + half + 17, n},
                                           {host + 3 * n, dev.data() + 2 * n, n},
                                           {host + half + 3 * n, dev.data() + 3 * n, n}};
  copy(requests, s);
  bytes_t dev_expected = dev_before;
  std::memcpy(dev_expected.data(), host_before.data() + 13, n);
  std::memcpy(dev_expected.data() + n, host_before.data() + half + 17, n);
  bytes_t host_expected = host_before;
  std::memcpy(host_expected.data() + 3 * n, dev_before.data() + 2 * n, n);
  std::memcpy(host_expected.data() + half + 3 * n, dev_before.data() + 3 * n, n);
  EXPECT_EQ(dev.read(), dev_expected);
  EXPECT_TRUE(std::equal(host_expected.begin(), host_expected.end(), host)) << "the host block differs";
}

}  // namespace
}  // namespace syncmem::test
