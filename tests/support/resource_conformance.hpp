#pragma once

// The conformance suite every memory resource passes, written once
// (TYPED_TEST_SUITE_P) and instantiated per resource with a factory:
//
//   struct my_factory {
//     static device_id device();              // whose streams the tests use
//     static bool available();                // false: the suite skips
//     static std::string why_unavailable();
//     static std::unique_ptr<mr::memory_resource> make();
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(my, resource_conformance, ::testing::Types<my_factory>);
//
// A factory for a CUDA resource skips without a GPU, and fails instead when
// SYNCMEM_REQUIRE_CUDA is set.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "device_ops.hpp"
#include "memory_pattern.hpp"
#include "pattern.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/failure_adaptor.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/mr/statistics_adaptor.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::test {

template <class Factory>
class resource_conformance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Factory::available()) {
      if (Factory::device().kind() == device_kind::cuda && cuda_required()) {
        FAIL() << "SYNCMEM_REQUIRE_CUDA is set: " << Factory::why_unavailable();
      }
      GTEST_SKIP() << Factory::why_unavailable();
    }
    resource_ = Factory::make();
  }

  mr::memory_resource& resource() { return *resource_; }
  static device_id device() { return Factory::device(); }
  memory_kind kind() const { return resource_->kind(); }

  std::unique_ptr<mr::memory_resource> resource_;
};

TYPED_TEST_SUITE_P(resource_conformance);

TYPED_TEST_P(resource_conformance, ZeroBytesIsNullAndFreeOfNullIsNothing) {
  auto s = default_stream(this->device());
  EXPECT_EQ(this->resource().allocate(0, s), nullptr);
  this->resource().deallocate(nullptr, 0, s);
  EXPECT_FALSE(this->resource().name().empty());
  EXPECT_TRUE(this->resource().is_equal(this->resource()));
}

TYPED_TEST_P(resource_conformance, HonoursEveryAlignmentItAccepts) {
  auto s = default_stream(this->device());
  for (std::size_t alignment = 1; alignment <= this->resource().max_alignment(); alignment *= 2) {
    for (std::size_t bytes : {std::size_t{1}, std::size_t{3}, std::size_t{255}, std::size_t{4097}}) {
      void* p = this->resource().allocate(bytes, s, alignment);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignment, 0U) << "alignment " << alignment;
      this->resource().deallocate(p, bytes, s, alignment);
    }
    if (alignment >= 4096) break;  // larger ones cost real memory per call
  }
}

TYPED_TEST_P(resource_conformance, RefusesBadArguments) {
  auto s = default_stream(this->device());
  EXPECT_THROW((void)this->resource().allocate(64, s, 3), logic_error);
  EXPECT_THROW((void)this->resource().allocate(64, s, this->resource().max_alignment() * 2), logic_error);
  if (this->resource().device()) {
    // A stream of another device is refused, naming both.
    const auto here = *this->resource().device();
    const device_id other =
        here.kind() == device_kind::emulated ? device_id::emulated((here.index() + 1) % 3) : device_id::emulated(0);
    if (other != here) {
      try {
        (void)this->resource().allocate(64, default_stream(other));
        FAIL() << "a stream of another device was accepted";
      } catch (const logic_error& e) {
        EXPECT_NE(std::string{e.what()}.find(to_string(other)), std::string::npos) << e.what();
        EXPECT_NE(std::string{e.what()}.find(to_string(here)), std::string::npos) << e.what();
      }
    }
  }
}

TYPED_TEST_P(resource_conformance, LiveBlocksAreDistinctAndKeepTheirContents) {
  auto s = default_stream(this->device());
  struct block {
    std::uint8_t* p;
    std::size_t bytes;
    std::uint64_t seed;
  };
  std::vector<block> live;
  auto& rng = test::rng();
  for (int i = 0; i < 64; ++i) {
    const std::size_t bytes = 1 + rng() % (i % 8 == 0 ? (1 << 20) : 4096);
    auto* p = static_cast<std::uint8_t*>(this->resource().allocate(bytes, s));
    ASSERT_NE(p, nullptr);
    const auto seed = fresh_seed();
    fill_pattern(this->kind(), s, p, bytes, seed);
    live.push_back({p, bytes, seed});
    if (i % 3 == 2) {  // free one at random, so that freed memory is reused
      const auto victim = rng() % live.size();
      ASSERT_TRUE(holds_pattern(this->kind(), s, live[victim].p, live[victim].bytes, live[victim].seed));
      this->resource().deallocate(live[victim].p, live[victim].bytes, s);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
  std::vector<block> sorted = live;
  std::sort(sorted.begin(), sorted.end(), [](const block& a, const block& b) { return a.p < b.p; });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    EXPECT_LE(sorted[i - 1].p + sorted[i - 1].bytes, sorted[i].p) << "live blocks overlap";
  }
  for (const auto& b : live) {
    EXPECT_TRUE(holds_pattern(this->kind(), s, b.p, b.bytes, b.seed));
    this->resource().deallocate(b.p, b.bytes, s);
  }
}

TYPED_TEST_P(resource_conformance, ManyThreadsOnManyStreams) {
  scoped_emulated_delay delay{std::chrono::microseconds{5}};
  const auto failed = run_threads(6, [&](int) {
    stream own{this->device()};
    stream_view s = own;
    std::mt19937_64 random{fresh_seed()};
    struct block {
      void* p;
      std::size_t bytes;
      std::uint64_t seed;
    };
    std::vector<block> live;
    for (int i = 0; i < 60; ++i) {
      if (live.size() < 8 && random() % 3 != 0) {
        const std::size_t bytes = 1 + random() % (random() % 4 == 0 ? 300000 : 5000);
        void* p = this->resource().allocate(bytes, s);
        const std::uint64_t seed = random();
        fill_pattern(this->kind(), s, p, bytes, seed);
        live.push_back({p, bytes, seed});
      } else if (!live.empty()) {
        const auto victim = random() % live.size();
        auto b = live[victim];
        if (!holds_pattern(this->kind(), s, b.p, b.bytes, b.seed)) throw std::runtime_error{"corrupted block"};
        this->resource().deallocate(b.p, b.bytes, s);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
      }
    }
    for (auto& b : live) {
      if (!holds_pattern(this->kind(), s, b.p, b.bytes, b.seed)) throw std::runtime_error{"corrupted block"};
      this->resource().deallocate(b.p, b.bytes, s);
    }
    s.synchronize();
  });
  EXPECT_EQ(failed.count, 0) << failed.first;
}

// Memory freed on a stream whose work is still running (a delayed write) and
// allocated at once on another stream must not be written there before that
// work is done: either it is other memory, or the new stream is ordered after
// the old one. Proved by contents: the later stream's bytes must win.
TYPED_TEST_P(resource_conformance, CrossStreamReuseWaitsForTheFreeingStream) {
  if (this->kind() != memory_kind::device) GTEST_SKIP() << "host memory is not written in stream order";
  stream first{this->device()};
  stream second{this->device()};
  auto& rng = test::rng();
  for (int round = 0; round < 4; ++round) {
    const std::size_t bytes = 1 + rng() % (round % 2 == 0 ? 4096 : 300000);
    void* p = this->resource().allocate(bytes, first);
    device_sleep(first, std::chrono::milliseconds{20});
    device_fill_pattern(first, p, bytes, fresh_seed());  // runs late
    this->resource().deallocate(p, bytes, first);
    void* q = this->resource().allocate(bytes, second);
    const auto seed = fresh_seed();
    device_fill_pattern(second, q, bytes, seed);
    first.synchronize();
    EXPECT_TRUE(holds_pattern(this->kind(), second, q, bytes, seed))
        << "round " << round << (p == q ? " (same block)" : "");
    this->resource().deallocate(q, bytes, second);
  }
}

// Allocations refused by a failure_adaptor over the resource throw
// out_of_memory, and neither the live blocks nor later allocations suffer.
TYPED_TEST_P(resource_conformance, FailureAdaptorLeavesItConsistent) {
  auto s = default_stream(this->device());
  mr::failure_adaptor failing{this->resource(), mr::failure_adaptor::every_nth(3)};
  EXPECT_EQ(&failing.upstream(), &this->resource());
  struct block {
    void* p;
    std::size_t bytes;
    std::uint64_t seed;
  };
  std::vector<block> live;
  auto& rng = test::rng();
  int refused = 0;
  for (int i = 0; i < 30; ++i) {
    const std::size_t bytes = 1 + rng() % 70000;
    try {
      void* p = failing.allocate(bytes, s);
      const auto seed = fresh_seed();
      fill_pattern(this->kind(), s, p, bytes, seed);
      live.push_back({p, bytes, seed});
    } catch (const out_of_memory& e) {
      ++refused;
      EXPECT_EQ(e.info().requested, bytes);
      EXPECT_NE(std::string{e.what()}.find("injected"), std::string::npos) << e.what();
    }
    if (i % 4 == 3 && !live.empty()) {
      const auto victim = rng() % live.size();
      ASSERT_TRUE(holds_pattern(this->kind(), s, live[victim].p, live[victim].bytes, live[victim].seed));
      failing.deallocate(live[victim].p, live[victim].bytes, s);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
  EXPECT_EQ(refused, 10);
  EXPECT_EQ(failing.failures(), 10U);
  EXPECT_EQ(failing.calls(), 30U);
  failing.set_predicate({});
  for (int i = 0; i < 5; ++i) {
    const std::size_t bytes = 1 + rng() % 70000;
    void* p = failing.allocate(bytes, s);
    const auto seed = fresh_seed();
    fill_pattern(this->kind(), s, p, bytes, seed);
    live.push_back({p, bytes, seed});
  }
  for (const auto& b : live) {
    EXPECT_TRUE(holds_pattern(this->kind(), s, b.p, b.bytes, b.seed));
    failing.deallocate(b.p, b.bytes, s);
  }
}

// A statistics_adaptor over the resource counts exactly what passed.
TYPED_TEST_P(resource_conformance, StatisticsAdaptorCountsExactly) {
  auto s = default_stream(this->device());
  mr::statistics_adaptor counted{this->resource()};
  std::vector<std::pair<void*, std::size_t>> live;
  std::int64_t bytes_now = 0;
  std::int64_t bytes_peak = 0;
  std::int64_t bytes_total = 0;
  std::int64_t count_peak = 0;
  std::int64_t frees = 0;
  auto& rng = test::rng();
  for (int i = 0; i < 60; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      const std::size_t bytes = 1 + rng() % 200000;
      live.emplace_back(counted.allocate(bytes, s), bytes);
      bytes_now += static_cast<std::int64_t>(bytes);
      bytes_total += static_cast<std::int64_t>(bytes);
      bytes_peak = std::max(bytes_peak, bytes_now);
      count_peak = std::max(count_peak, static_cast<std::int64_t>(live.size()));
    } else {
      const auto victim = rng() % live.size();
      counted.deallocate(live[victim].first, live[victim].second, s);
      bytes_now -= static_cast<std::int64_t>(live[victim].second);
      ++frees;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
    const auto st = counted.statistics();
    ASSERT_EQ(st.bytes.current, bytes_now);
    ASSERT_EQ(st.bytes.peak, bytes_peak);
    ASSERT_EQ(st.bytes.total, bytes_total);
    ASSERT_EQ(st.allocations.current, static_cast<std::int64_t>(live.size()));
    ASSERT_EQ(st.allocations.peak, count_peak);
    ASSERT_EQ(st.deallocations, frees);
  }
  for (auto [p, bytes] : live) counted.deallocate(p, bytes, s);
  EXPECT_EQ(counted.statistics().bytes.current, 0);
  EXPECT_EQ(counted.statistics().allocations.current, 0);
  EXPECT_EQ(counted.statistics().failed_allocations, 0);
}

REGISTER_TYPED_TEST_SUITE_P(resource_conformance, ZeroBytesIsNullAndFreeOfNullIsNothing, HonoursEveryAlignmentItAccepts,
                            RefusesBadArguments, LiveBlocksAreDistinctAndKeepTheirContents, ManyThreadsOnManyStreams,
                            CrossStreamReuseWaitsForTheFreeingStream, FailureAdaptorLeavesItConsistent,
                            StatisticsAdaptorCountsExactly);

// Factory helpers for the common cases.
template <device_kind Kind>
struct on_device {
  static device_id device() { return device_id{Kind, 0}; }
  static bool available() { return device_count(Kind) > 0; }
  static std::string why_unavailable() {
    return std::string{"no "} + std::string{to_string(Kind)} + " device: " + why_no_devices(Kind);
  }
};

}  // namespace syncmem::test
