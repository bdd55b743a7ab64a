// ctest-labels: threaded
// The caching pinned resource: the conformance suite, size classes, reuse only
// after the copies that used a block have completed, statistics, reserve,
// limits, and the fallback to pageable memory when pinning fails.
#include "syncmem/mr/caching_pinned_resource.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "device_ops.hpp"
#include "pattern.hpp"
#include "resource_conformance.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/emulated_resource.hpp"
#include "syncmem/mr/pageable_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {

struct caching_pinned_emulated : on_device<device_kind::emulated> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::caching_pinned_resource>(device_kind::emulated);
  }
};
struct caching_pinned_cuda : on_device<device_kind::cuda> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::caching_pinned_resource>(device_kind::cuda);
  }
};
using caching_pinned_factories = ::testing::Types<caching_pinned_emulated, caching_pinned_cuda>;
INSTANTIATE_TYPED_TEST_SUITE_P(caching_pinned, resource_conformance, caching_pinned_factories);

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

// Pinned memory of an emulated backend that refuses to hold more than `limit`
// bytes at once, as a page-locked limit would.
class limited_pinned_upstream final : public mr::memory_resource {
 public:
  explicit limited_pinned_upstream(std::size_t limit)
      : memory_resource{memory_kind::pinned_host, std::nullopt, 4096}, limit_{limit} {}
  [[nodiscard]] std::string name() const override { return "limited_pinned_upstream"; }
  [[nodiscard]] std::size_t refusals() const { return refusals_.load(); }

 private:
  void* do_allocate(std::size_t bytes, stream_view s, std::size_t alignment) override {
    {
      std::lock_guard lock{mutex_};
      if (held_ + bytes > limit_) {
        ++refusals_;
        oom_info info;
        info.requested = bytes;
        info.resource = name();
        throw out_of_memory{std::move(info)};
      }
      held_ += bytes;
    }
    return real_.allocate(bytes, s, alignment);
  }
  void do_deallocate(void* p, std::size_t bytes, stream_view s, std::size_t alignment) noexcept override {
    real_.deallocate(p, bytes, s, alignment);
    std::lock_guard lock{mutex_};
    held_ -= bytes;
  }

  mr::pinned_resource real_{device_kind::emulated};
  std::mutex mutex_;
  std::size_t limit_;
  std::size_t held_ = 0;
  std::atomic<std::size_t> refusals_{0};
};

// Device memory of `device`, freed at the end of the scope.
struct device_buffer {
  device_buffer(device_id d, std::size_t n)
      : device{d}, bytes{n}, p{mr::get_per_device_resource(d).allocate(n, default_stream(d))} {}
  ~device_buffer() { mr::get_per_device_resource(device).deallocate(p, bytes, default_stream(device)); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_id device;
  std::size_t bytes;
  void* p;
};

void backend_copy(void* dst, const void* src, std::size_t n, stream_view s) {
  device_guard guard{s.device()};
  detail::backend_for(s.device()).memcpy_async(dst, src, n, s.device().index(), s.handle());
}

void fill_host(void* p, std::size_t n, std::uint64_t seed) {
  auto* b = static_cast<std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = pattern_byte(seed, i);
}

TEST(CachingPinnedSizes, ClassesBoundTheWaste) {
  using r = mr::caching_pinned_resource;
  EXPECT_EQ(r::block_size(0), 0U);
  EXPECT_EQ(r::block_size(1), 4096U);
  EXPECT_EQ(r::block_size(4096), 4096U);
  EXPECT_EQ(r::block_size(4097), 8192U);
  EXPECT_EQ(r::block_size(32 * KiB), 32 * KiB);
  EXPECT_EQ(r::block_size(64 * MiB), 64 * MiB);
  EXPECT_EQ(r::block_size(64 * MiB + 1), 72 * MiB);  // not 128 MiB: no doubling
  auto& random = rng();
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 20000; ++i) {
    const int bits = 1 + static_cast<int>(random() % 40);
    sizes.push_back(1 + random() % (std::size_t{1} << bits));
  }
  for (int k = 1; k < 40; ++k) {
    for (std::size_t delta : {std::size_t{0}, std::size_t{1}}) {
      sizes.push_back((std::size_t{1} << k) + delta);
      sizes.push_back((std::size_t{1} << k) - delta);
    }
  }
  for (const std::size_t n : sizes) {
    if (n == 0) continue;
    const std::size_t b = r::block_size(n);
    ASSERT_GE(b, n) << n;
    ASSERT_EQ(b % 4096, 0U) << n;
    ASSERT_EQ(r::block_size(b), b) << "a class size is its own class: " << n;
    if (n > 32 * KiB) {
      ASSERT_LE(b - n, n / 8) << "more than 12.5% waste for " << n;
    } else {
      ASSERT_LT(b - n, 4096U) << n;
    }
  }
}

template <class Kind>
class CachingPinned : public device_test<Kind> {};
TYPED_TEST_SUITE(CachingPinned, device_kinds, device_kind_names);

TYPED_TEST(CachingPinned, HandsOutPinnedMemoryAndNamesItsUpstream) {
  mr::caching_pinned_resource r{this->kind};
  EXPECT_EQ(r.kind(), memory_kind::pinned_host);
  EXPECT_FALSE(r.device().has_value());
  EXPECT_EQ(r.max_alignment(), 4096U);
  EXPECT_THAT(r.name(), HasSubstr("caching_pinned_resource(pinned_resource("));
  auto s = default_stream(this->dev());
  void* p = r.allocate(1000, s);
  EXPECT_EQ(get_pointer_attributes(p).kind, memory_kind::pinned_host);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 4096, 0U);
  r.deallocate(p, 1000, s);
}

// A block freed while a copy from it is still queued must not be handed out:
// the host would overwrite what the copy has yet to read.
TYPED_TEST(CachingPinned, FreedBlockIsReusedOnlyAfterItsCopyCompleted) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  scoped_emulated_delay delay{std::chrono::microseconds{200}};
  mr::caching_pinned_resource r{this->kind};
  stream s{this->dev()};
  const std::size_t n = 64 * KiB + rng()() % (64 * KiB);
  device_buffer d{this->dev(), n};
  const auto seed = fresh_seed();

  void* a = r.allocate(n, s);
  fill_host(a, n, seed);
  stream_latch hold{s};  // the copy stays queued
  backend_copy(d.p, a, n, s);
  r.deallocate(a, n, s);

  void* b = r.allocate(n, s);
  std::memset(b, 0xA5, n);  // a host write at once, as any user of pinned memory may do
  EXPECT_NE(a, b);
  hold.release();
  EXPECT_TRUE(holds_pattern(memory_kind::device, s, d.p, n, seed));

  r.deallocate(b, n, s);
  s.synchronize();
  const auto before = r.statistics();
  EXPECT_EQ(before.blocks_pending, 0U);
  EXPECT_EQ(before.bytes_cached, 2 * mr::caching_pinned_resource::block_size(n));
  std::set<void*> again{r.allocate(n, s), r.allocate(n, s)};
  EXPECT_EQ(again, (std::set<void*>{a, b}));
  EXPECT_EQ(r.statistics().hits, before.hits + 2);
  for (void* p : again) r.deallocate(p, n, s);
}

TYPED_TEST(CachingPinned, RecordedStreamsDelayReuseToo) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  mr::caching_pinned_resource r{this->kind};
  stream idle{this->dev()};
  stream busy{this->dev()};
  const std::size_t n = 256 * KiB;
  device_buffer d{this->dev(), n};
  const auto seed = fresh_seed();

  void* a = r.allocate(n, idle);
  fill_host(a, n, seed);
  stream_latch hold{busy};
  backend_copy(d.p, a, n, busy);
  r.record_stream(a, busy);
  r.record_stream(a, busy);  // declaring twice is one use
  r.deallocate(a, n, idle);  // idle has nothing queued: only busy holds the block

  void* b = r.allocate(n, idle);
  std::memset(b, 0x5A, n);
  EXPECT_NE(a, b);
  hold.release();
  EXPECT_TRUE(holds_pattern(memory_kind::device, busy, d.p, n, seed));
  r.deallocate(b, n, idle);
  idle.synchronize();
  EXPECT_EQ(r.statistics().blocks_pending, 0U);

  EXPECT_THROW(r.record_stream(a, busy), logic_error);  // freed: not a live block
  int local = 0;
  EXPECT_THROW(r.record_stream(&local, busy), logic_error);
}

TYPED_TEST(CachingPinned, HostOnlyFreeIsReusableAtOnce) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  mr::caching_pinned_resource r{this->kind};
  auto s = default_stream(this->dev());
  void* a = r.allocate(5000, s);
  r.deallocate_host_only(a, 5000);
  EXPECT_EQ(r.allocate(5000, s), a);
  const auto stats = r.statistics();
  EXPECT_EQ(stats.hits, 1U);
  EXPECT_EQ(stats.misses, 1U);
  EXPECT_EQ(stats.allocations, 2U);
  r.deallocate_host_only(a, 5000);

  // With a recorded stream, the host-only free still waits for that stream.
  stream busy{this->dev()};
  void* b = r.allocate(5000, s);
  stream_latch hold{busy};
  r.record_stream(b, busy);
  r.deallocate_host_only(b, 5000);
  void* c = r.allocate(5000, s);
  EXPECT_NE(c, b);
  r.deallocate_host_only(c, 5000);
  hold.release();
  busy.synchronize();
}

// A stream declared with record_stream and destroyed since finished its work:
// it holds the block no longer, and a new stream that got its handle (as
// emulated devices usually give) is another stream, whose work does not hold it.
TYPED_TEST(CachingPinned, ARecordedStreamDestroyedSinceHoldsNothing) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  mr::caching_pinned_resource r{this->kind};
  stream own{this->dev()};
  const std::size_t n = 4096 + rng()() % (64 * KiB);
  void* a = r.allocate(n, own);
  std::optional<stream> recorded{std::in_place, this->dev()};
  r.record_stream(a, *recorded);
  recorded.reset();
  stream successor{this->dev()};
  stream_latch hold{successor};  // nothing of the block's is queued here
  r.deallocate(a, n, own);
  own.synchronize();
  void* again = r.allocate(n, own);
  EXPECT_EQ(again, a) << "the block waited for a stream that merely got the handle of one it was used on";
  hold.release();
  r.deallocate(again, n, own);
}

TYPED_TEST(CachingPinned, StatisticsAddUp) {
  mr::caching_pinned_resource r{this->kind};
  auto s = default_stream(this->dev());
  std::vector<std::pair<void*, std::size_t>> live;
  std::size_t in_use = 0;
  for (int i = 0; i < 40; ++i) {
    const std::size_t n = 1 + rng()() % (i % 4 == 0 ? 3 * MiB : 40 * KiB);
    live.emplace_back(r.allocate(n, s), n);
    in_use += mr::caching_pinned_resource::block_size(n);
  }
  auto stats = r.statistics();
  EXPECT_EQ(stats.allocations, 40U);
  EXPECT_EQ(stats.hits + stats.misses, 40U);
  EXPECT_EQ(stats.bytes_in_use, in_use);
  EXPECT_EQ(stats.bytes_pinned, stats.bytes_in_use + stats.bytes_cached + stats.bytes_pending);
  EXPECT_GE(stats.peak_bytes_pinned, stats.bytes_pinned);
  for (auto [p, n] : live) r.deallocate(p, n, s);
  s.synchronize();
  stats = r.statistics();
  EXPECT_EQ(stats.bytes_in_use, 0U);
  EXPECT_EQ(stats.bytes_pending, 0U);
  EXPECT_EQ(stats.bytes_cached, in_use);
  EXPECT_EQ(stats.bytes_pinned, in_use);
  EXPECT_EQ(r.trim(), in_use);
  stats = r.statistics();
  EXPECT_EQ(stats.bytes_cached, 0U);
  EXPECT_EQ(stats.bytes_pinned, 0U);
  EXPECT_EQ(stats.peak_bytes_pinned, in_use);
}

TYPED_TEST(CachingPinned, ReserveMakesLaterRequestsHits) {
  mr::caching_pinned_options options;
  options.reserve_block_bytes = 1 * MiB;
  options.reserve_blocks = 3;
  mr::caching_pinned_resource r{this->kind, options};
  EXPECT_EQ(r.statistics().bytes_cached, 3 * MiB);
  auto s = default_stream(this->dev());
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(r.allocate(1 * MiB - 100, s));  // the same class
  EXPECT_EQ(r.statistics().hits, 3U);
  EXPECT_EQ(r.statistics().misses, 0U);
  blocks.push_back(r.allocate(1 * MiB, s));
  EXPECT_EQ(r.statistics().misses, 1U);
  for (void* p : blocks) r.deallocate_host_only(p, 1 * MiB);
  r.reserve(64 * KiB, 2);
  EXPECT_EQ(r.statistics().bytes_cached, 4 * MiB + 128 * KiB);
}

TYPED_TEST(CachingPinned, CacheLimitUnpinsTheExcess) {
  mr::caching_pinned_options options;
  options.max_cached_bytes = 128 * KiB;
  mr::caching_pinned_resource r{this->kind, options};
  auto s = default_stream(this->dev());
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(r.allocate(64 * KiB, s));
  for (void* p : blocks) r.deallocate(p, 64 * KiB, s);
  s.synchronize();
  const auto stats = r.statistics();
  EXPECT_EQ(stats.bytes_cached, 128 * KiB);
  EXPECT_EQ(stats.bytes_pinned, 128 * KiB);
}

TEST(CachingPinnedFallback, PageableMemoryWithOneWarningWhenPinningFails) {
  limited_pinned_upstream upstream{0};  // refuses everything
  mr::caching_pinned_resource r{upstream};
  auto s = default_stream(device_id::emulated(0));
  ::testing::internal::CaptureStderr();
  void* a = r.allocate(10000, s);
  void* b = r.allocate(3 * MiB, s);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(get_pointer_attributes(a).kind, memory_kind::pageable_host);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 4096, 0U);
  std::memset(b, 1, 3 * MiB);  // it is real memory
  std::size_t warnings = 0;
  for (auto pos = log.find("serving pageable memory"); pos != std::string::npos;
       pos = log.find("serving pageable memory", pos + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 1U) << log;
  auto stats = r.statistics();
  EXPECT_EQ(stats.fallbacks, 2U);
  EXPECT_EQ(stats.bytes_pinned, 0U);
  EXPECT_EQ(stats.bytes_pageable, mr::caching_pinned_resource::block_size(10000) + 3 * MiB);
  r.deallocate(a, 10000, s);
  r.deallocate(b, 3 * MiB, s);
  s.synchronize();
  stats = r.statistics();
  EXPECT_EQ(stats.bytes_pageable, 0U);  // pageable blocks are freed, not cached
  EXPECT_EQ(stats.bytes_cached, 0U);
}

TEST(CachingPinnedFallback, WithoutFallbackItThrowsOutOfMemory) {
  limited_pinned_upstream upstream{0};
  mr::caching_pinned_options options;
  options.fallback_to_pageable = false;
  mr::caching_pinned_resource r{upstream, options};
  try {
    (void)r.allocate(12345, default_stream(device_id::emulated(0)));
    FAIL() << "did not throw";
  } catch (const out_of_memory& oom) {
    EXPECT_EQ(oom.info().requested, 12345U);
    EXPECT_THAT(oom.what(), HasSubstr("caching_pinned_resource(limited_pinned_upstream)"));
    EXPECT_THAT(oom.info().hint, HasSubstr("ulimit -l"));
  }
  EXPECT_EQ(r.statistics().allocations, 0U);
}

TEST(CachingPinnedFallback, CachedBlocksAreUnpinnedBeforeGivingUp) {
  limited_pinned_upstream upstream{128 * KiB};
  mr::caching_pinned_resource r{upstream};
  auto s = default_stream(device_id::emulated(0));
  void* a = r.allocate(64 * KiB, s);
  void* b = r.allocate(64 * KiB, s);
  r.deallocate_host_only(a, 64 * KiB);
  r.deallocate_host_only(b, 64 * KiB);  // 128 KiB cached: the limit is reached
  void* c = r.allocate(100 * KiB, s);   // another class: pinning fails, the cache is trimmed, pinning succeeds
  EXPECT_EQ(get_pointer_attributes(c).kind, memory_kind::pinned_host);
  const auto stats = r.statistics();
  EXPECT_EQ(stats.fallbacks, 0U);
  EXPECT_EQ(stats.bytes_cached, 0U);
  EXPECT_EQ(upstream.refusals(), 1U);
  r.deallocate_host_only(c, 100 * KiB);
}

TEST(CachingPinnedUpstream, MustBePinnedHostMemory) {
  mr::emulated_resource device_memory{device_id::emulated(0)};
  EXPECT_THROW(mr::caching_pinned_resource{device_memory}, logic_error);
  mr::pageable_resource pageable;
  EXPECT_THROW(mr::caching_pinned_resource{pageable}, logic_error);
  mr::pinned_resource pinned{device_kind::emulated};
  mr::caching_pinned_resource r{pinned};
  EXPECT_EQ(&r.upstream(), &pinned);
}

TEST(CachingPinnedMisuse, UnknownPointersAreReportedNotFreed) {
  mr::caching_pinned_resource r{device_kind::emulated};
  auto s = default_stream(device_id::emulated(0));
  int local = 0;
  ::testing::internal::CaptureStderr();
  r.deallocate(&local, sizeof local, s);
  r.deallocate_host_only(&local, sizeof local);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("which it did not hand out"));
}

TEST(CachingPinnedMisuse, DestructionFreesBlocksStillHandedOut) {
  auto r = std::make_unique<mr::caching_pinned_resource>(device_kind::emulated);
  void* p = r->allocate(4096, default_stream(device_id::emulated(0)));
  std::memset(p, 0, 4096);
  ::testing::internal::CaptureStderr();
  r.reset();
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("still allocated"));
  EXPECT_EQ(get_pointer_attributes(p).kind, memory_kind::pageable_host);  // unpinned and gone
}

// Threads copy from pinned blocks on their own streams and free each block at
// once; a block handed out before its copy ran would be overwritten by the
// next owner's pattern, and the device would receive the wrong bytes.
TYPED_TEST(CachingPinned, ManyThreadsNeverSeeABlockInUse) {
  scoped_emulated_delay delay{std::chrono::microseconds{100}};
  mr::caching_pinned_resource r{this->kind};
  const auto failed = run_threads(6, [&](int) {
    stream s{this->dev()};
    std::mt19937_64 random{fresh_seed()};
    struct sent {
      std::unique_ptr<device_buffer> d;
      std::uint64_t seed;
    };
    std::vector<sent> copies;
    std::size_t n = 0;
    for (int i = 0; i < 40; ++i) {
      if (i % 8 == 7) {
        // Every eighth block is the size of the last one, freed and complete by
        // now: some block is reused however the threads interleave.
        s.synchronize();
      } else {
        n = 4096 * (1 + random() % 6);  // few classes: blocks are reused a lot
      }
      void* p = r.allocate(n, s);
      const std::uint64_t seed = random();
      fill_host(p, n, seed);
      auto d = std::make_unique<device_buffer>(this->dev(), n);
      if (random() % 4 == 0) device_sleep(s, std::chrono::microseconds{500});
      backend_copy(d->p, p, n, s);
      r.deallocate(p, n, s);
      copies.push_back({std::move(d), seed});
    }
    for (auto& c : copies) {
      if (!holds_pattern(memory_kind::device, s, c.d->p, c.d->bytes, c.seed)) {
        throw std::runtime_error{"a copy read a block that was handed out again before it ran"};
      }
    }
  });
  EXPECT_EQ(failed.count, 0) << failed.first;
  EXPECT_GT(r.statistics().hits, 0U);
}

}  // namespace
}  // namespace syncmem::test
