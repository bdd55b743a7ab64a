// ctest-labels: threaded
// The caching allocator: the conformance suite in several configurations, and
// what is particular to it (stream-ordered reuse, record_stream, per-thread
// caches, statistics, snapshots, out of memory, growable segments).
#include "syncmem/mr/caching_resource.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <thread>

#include "resource_conformance.hpp"
#include "syncmem/event.hpp"
#include "syncmem/mr/allocation_label.hpp"
#include "syncmem/mr/cuda_resource.hpp"
#include "syncmem/mr/emulated_resource.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {

constexpr std::size_t MiB = std::size_t{1} << 20;

// ---- the conformance suite -----------------------------------------------------

struct caching_emulated : on_device<device_kind::emulated> {
  static std::unique_ptr<mr::memory_resource> make() { return std::make_unique<mr::caching_resource>(device()); }
};
struct caching_emulated_no_thread_cache : on_device<device_kind::emulated> {
  static device_id device() { return device_id::emulated(2); }
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::caching_resource>(device(), mr::caching_options::parse("thread_cache_mb:0"));
  }
};
struct caching_emulated_expandable : on_device<device_kind::emulated> {
  static device_id device() { return device_id::emulated(1); }
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::caching_resource>(device(), mr::caching_options::parse("expandable:1"));
  }
};
struct caching_emulated_small_max_split : on_device<device_kind::emulated> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::caching_resource>(device(), mr::caching_options::parse("max_split_mb:2"));
  }
};
struct caching_cuda : on_device<device_kind::cuda> {
  static std::unique_ptr<mr::memory_resource> make() { return std::make_unique<mr::caching_resource>(device()); }
};
struct caching_cuda_expandable : on_device<device_kind::cuda> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::caching_resource>(device(), mr::caching_options::parse("expandable:1"));
  }
};

using caching_kinds = ::testing::Types<caching_emulated, caching_emulated_no_thread_cache, caching_emulated_expandable,
                                       caching_emulated_small_max_split, caching_cuda, caching_cuda_expandable>;
INSTANTIATE_TYPED_TEST_SUITE_P(caching, resource_conformance, caching_kinds);

namespace {

// ---- what is particular to it, on every device kind ---------------------------------

template <class Kind>
class caching_test : public device_test<Kind> {
 protected:
  void SetUp() override {
    device_test<Kind>::SetUp();
    if (this->IsSkipped() || this->HasFatalFailure()) return;
    // The emulated devices of the tests have 512 MiB; leave room on a GPU too.
    device_ = this->dev(this->kind == device_kind::emulated ? 1 : 0);
  }

  std::unique_ptr<mr::caching_resource> make(const std::string& conf = {}) {
    return std::make_unique<mr::caching_resource>(device_, mr::caching_options::parse(conf));
  }

  void fill(stream_view s, void* p, std::size_t n, std::uint64_t seed) { device_fill_pattern(s, p, n, seed); }
  ::testing::AssertionResult holds(stream_view s, const void* p, std::size_t n, std::uint64_t seed) {
    return holds_pattern(memory_kind::device, s, p, n, seed);
  }

  device_id device_{device_kind::emulated, 0};
};

TYPED_TEST_SUITE(caching_test, device_kinds, device_kind_names);

TYPED_TEST(caching_test, ReuseOnTheSameStreamIsImmediate) {
  for (const char* conf : {"", "thread_cache_mb:0"}) {
    auto r = this->make(conf);
    stream s{this->device_};
    for (std::size_t bytes : {std::size_t{300}, std::size_t{70000}, 3 * MiB + 5}) {
      void* p = r->allocate(bytes, s);
      r->deallocate(p, bytes, s);
      for (int i = 0; i < 4; ++i) {
        void* q = r->allocate(bytes, s);
        EXPECT_EQ(q, p) << conf << ", " << bytes << " bytes, round " << i;
        r->deallocate(q, bytes, s);
      }
    }
    EXPECT_EQ(r->statistics().stream_waits, 0U);
  }
}

TYPED_TEST(caching_test, FreeMemoryOfAnotherStreamIsTakenAfterAnEvent) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  for (const char* conf : {"", "thread_cache_mb:0", "expandable:1"}) {
    auto r = this->make(conf);
    stream first{this->device_};
    stream second{this->device_};
    const std::size_t bytes = 5 * MiB;
    void* p = r->allocate(bytes, first);
    const auto reserved = r->statistics().reserved_bytes;
    stream_latch hold{first};
    this->fill(first, p, bytes, fresh_seed());  // still to run when the memory is taken
    r->deallocate(p, bytes, first);
    void* q = r->allocate(bytes, second);
    EXPECT_EQ(q, p) << conf << ": the free memory of the other stream should be reused";
    EXPECT_EQ(r->statistics().reserved_bytes, reserved) << conf;
    EXPECT_EQ(r->statistics().stream_waits, 1U) << conf;
    const auto seed = fresh_seed();
    this->fill(second, q, bytes, seed);
    hold.release();
    first.synchronize();
    EXPECT_TRUE(this->holds(second, q, bytes, seed)) << conf << ": the second stream wrote before the first was done";
    r->deallocate(q, bytes, second);
  }
}

// A growth of the growable range that takes idle pages freed on another
// stream does not wait for the device, which would wait for that stream
// (held on the host here, or waiting for another process in a collective):
// the growing stream waits for the stream that freed them.
TYPED_TEST(caching_test, GrowthTakesIdlePagesOfAHeldStreamWithoutWaitingForIt) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  for (const char* conf : {"expandable:1", "expandable:1,grow_from_idle:1"}) {
    auto r = this->make(conf);
    stream first{this->device_};
    stream second{this->device_};
    const std::size_t bytes = 8 * MiB;
    void* p = r->allocate(bytes, first);
    const auto reserved = r->statistics().reserved_bytes;
    ASSERT_EQ(reserved, bytes) << conf << ": the growable range maps whole 2 MiB pages";
    stream_latch hold{first};
    this->fill(first, p, bytes, fresh_seed());  // still to run when the pages move
    r->deallocate(p, bytes, first);
    const std::size_t more = 12 * MiB;  // no free block fits: the range grows, taking p's pages
    void* q = r->allocate(more, second);
    EXPECT_FALSE(hold.timed_out()) << conf << ": the growth waited for the held stream";
    EXPECT_EQ(r->statistics().reserved_bytes, reserved + 4 * MiB) << conf << ": p's pages should have moved";
    const auto seed = fresh_seed();
    this->fill(second, q, more, seed);
    hold.release();
    first.synchronize();
    EXPECT_TRUE(this->holds(second, q, more, seed)) << conf << ": the second stream wrote before the first was done";
    r->deallocate(q, more, second);
  }
}

// Random growths across streams under grow_from_idle, each block freed with a
// write still queued on its stream: whatever pages move, a block's bytes are
// what its own stream last wrote when it is checked.
TYPED_TEST(caching_test, PagesMovedAcrossStreamsKeepEveryByte) {
  auto r = this->make("expandable:1,grow_from_idle:1,thread_cache_mb:0");
  std::vector<stream> streams;
  for (int i = 0; i < 3; ++i) streams.emplace_back(this->device_);
  struct live {
    void* p;
    std::size_t bytes;
    stream_view s;
    std::uint64_t seed;
  };
  std::vector<live> blocks;
  auto& random = test::rng();
  for (int step = 0; step < 120; ++step) {
    if (blocks.size() < 6 && (blocks.empty() || random() % 2 == 0)) {
      const std::size_t bytes = (1 + random() % 12) * MiB + random() % MiB;
      const stream_view s = streams[random() % streams.size()];
      void* p = r->allocate(bytes, s);
      const auto seed = fresh_seed();
      this->fill(s, p, bytes, seed);
      blocks.push_back({p, bytes, s, seed});
      continue;
    }
    const auto i = random() % blocks.size();
    const live b = blocks[i];
    ASSERT_TRUE(this->holds(b.s, b.p, b.bytes, b.seed)) << "step " << step;
    device_sleep(b.s, std::chrono::milliseconds{5});
    this->fill(b.s, b.p, b.bytes, fresh_seed());  // still queued when the block is freed
    r->deallocate(b.p, b.bytes, b.s);
    blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
  }
  for (const live& b : blocks) {
    EXPECT_TRUE(this->holds(b.s, b.p, b.bytes, b.seed));
    r->deallocate(b.p, b.bytes, b.s);
  }
  EXPECT_GT(r->statistics().segment_releases, 0U) << "no growth moved pages: the test did not test";
}

TYPED_TEST(caching_test, RecordStreamDefersReuseUntilThatStreamHasPassed) {
  // The growable range's blocks too: grow_from_idle sends requests above 256 KiB there.
  for (const char* conf : {"", "thread_cache_mb:0", "expandable:1,grow_from_idle:1,thread_cache_mb:0"}) {
    for (const bool on_a_third_stream : {false, true}) {
      auto r = this->make(conf);
      stream home{this->device_};
      stream other{this->device_};
      stream third{this->device_};
      stream_view next = on_a_third_stream ? stream_view{third} : stream_view{home};
      const std::size_t bytes = 1 + test::rng()() % (test::rng()() % 2 == 0 ? 200000 : 8 * MiB);
      void* p = r->allocate(bytes, home);
      r->record_stream(p, other);
      device_sleep(other, std::chrono::milliseconds{50});
      this->fill(other, p, bytes, fresh_seed());  // a late use on the other stream
      r->deallocate(p, bytes, home);
      // Allocated again at once: the block must not be reused before the
      // other stream's use has passed.
      void* q = r->allocate(bytes, next);
      const auto seed = fresh_seed();
      this->fill(next, q, bytes, seed);
      other.synchronize();
      EXPECT_TRUE(this->holds(next, q, bytes, seed))
          << conf << (on_a_third_stream ? ", third stream" : ", same stream") << (p == q ? ": reused too early" : "");
      r->deallocate(q, bytes, next);
      // Once passed, the block is free again: nothing pending, all reusable.
      const auto snap = r->snapshot();
      EXPECT_EQ(snap.pending, 0U);
      EXPECT_EQ(snap.allocated, 0U);
      EXPECT_EQ(r->statistics().pending_bytes, 0U);
    }
  }
}

TYPED_TEST(caching_test, RecordStreamRefusesWhatItDoesNotKnow) {
  auto r = this->make();
  stream s{this->device_};
  int on_the_stack = 0;
  EXPECT_THROW(r->record_stream(&on_the_stack, s), logic_error);
  void* p = r->allocate(1000, s);
  if (this->kind == device_kind::emulated) {
    EXPECT_THROW(r->record_stream(p, default_stream(device_id::emulated(0))), logic_error);
  }
  r->record_stream(p, s);  // its own stream: harmless
  r->deallocate(p, 1000, s);
}

TYPED_TEST(caching_test, FreeOnAnotherStreamGivesTheBlockToThatStream) {
  auto r = this->make();
  stream first{this->device_};
  stream second{this->device_};
  const std::size_t bytes = 123456;
  void* p = r->allocate(bytes, first);
  this->fill(first, p, bytes, fresh_seed());
  event done{this->device_};
  done.record(first);
  second.wait(done);  // the caller orders the last use before the free
  r->deallocate(p, bytes, second);
  void* q = r->allocate(bytes, second);
  EXPECT_EQ(q, p);
  EXPECT_EQ(r->statistics().stream_waits, 0U);
  r->deallocate(q, bytes, second);
}

TYPED_TEST(caching_test, StatisticsAreExact) {
  auto r = this->make();
  stream s{this->device_};
  struct expected_state {
    std::size_t allocated = 0, requested = 0, peak_allocated = 0, peak_requested = 0;
    std::uint64_t allocations = 0, deallocations = 0;
    std::uint64_t total_allocated = 0, total_freed = 0, total_requested = 0, total_requested_freed = 0;
  } want;
  std::vector<std::pair<void*, std::size_t>> live;
  auto& rng = test::rng();
  auto check = [&](int step) {
    const auto st = r->statistics();
    ASSERT_EQ(st.allocated_bytes, want.allocated) << "step " << step;
    ASSERT_EQ(st.requested_bytes, want.requested) << "step " << step;
    ASSERT_EQ(st.peak_allocated_bytes, want.peak_allocated) << "step " << step;
    ASSERT_EQ(st.peak_requested_bytes, want.peak_requested) << "step " << step;
    ASSERT_EQ(st.live_allocations, live.size()) << "step " << step;
    ASSERT_EQ(st.allocations, want.allocations) << "step " << step;
    ASSERT_EQ(st.deallocations, want.deallocations) << "step " << step;
    ASSERT_EQ(st.cache_hits + st.cache_misses, st.allocations) << "step " << step;
    ASSERT_EQ(st.total_allocated_bytes, want.total_allocated) << "step " << step;
    ASSERT_EQ(st.total_freed_bytes, want.total_freed) << "step " << step;
    ASSERT_EQ(st.total_requested_bytes, want.total_requested) << "step " << step;
    ASSERT_EQ(st.total_requested_freed_bytes, want.total_requested_freed) << "step " << step;
    ASSERT_GE(st.reserved_bytes, st.allocated_bytes + st.cached_bytes) << "step " << step;
    ASSERT_EQ(st.reserved_bytes, st.allocated_bytes + st.cached_bytes + st.pending_bytes) << "step " << step;
    ASSERT_GE(st.peak_reserved_bytes, st.reserved_bytes) << "step " << step;
  };
  // A loop of recurring sizes (served by the thread's cache) and random ones.
  const std::size_t recurring[] = {512, 4096, 100000, 3 * MiB};
  for (int step = 0; step < 200; ++step) {
    if (live.empty() || rng() % 2 == 0) {
      const std::size_t bytes = step % 3 == 0 ? 1 + rng() % (4 * MiB) : recurring[rng() % 4];
      live.emplace_back(r->allocate(bytes, s), bytes);
      want.allocated += (bytes + 511) / 512 * 512;
      want.requested += bytes;
      want.peak_allocated = std::max(want.peak_allocated, want.allocated);
      want.peak_requested = std::max(want.peak_requested, want.requested);
      ++want.allocations;
      want.total_allocated += (bytes + 511) / 512 * 512;
      want.total_requested += bytes;
    } else {
      const auto victim = rng() % live.size();
      r->deallocate(live[victim].first, live[victim].second, s);
      want.allocated -= (live[victim].second + 511) / 512 * 512;
      want.requested -= live[victim].second;
      ++want.deallocations;
      want.total_freed += (live[victim].second + 511) / 512 * 512;
      want.total_requested_freed += live[victim].second;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
    check(step);
  }
  EXPECT_GT(r->statistics().thread_cache_hits, 0U);
  for (auto [p, bytes] : live) {
    r->deallocate(p, bytes, s);
    want.allocated -= (bytes + 511) / 512 * 512;
    want.requested -= bytes;
    ++want.deallocations;
    want.total_freed += (bytes + 511) / 512 * 512;
    want.total_requested_freed += bytes;
  }
  live.clear();
  check(-1);
  EXPECT_EQ(want.total_allocated, want.total_freed);
  r->reset_peaks();
  EXPECT_EQ(r->statistics().peak_allocated_bytes, 0U);
  EXPECT_EQ(r->statistics().peak_reserved_bytes, r->statistics().reserved_bytes);
  r->empty_cache();
  const auto st = r->statistics();
  EXPECT_EQ(st.reserved_bytes, 0U);
  EXPECT_EQ(st.cached_bytes, 0U);
  EXPECT_EQ(st.segments, 0U);
  EXPECT_EQ(st.segment_allocations, st.segment_releases);
}

// allocation_info answers what the snapshot shows of each live block, from
// the allocating thread (its own record) and from another (the pointer map),
// and nothing for freed blocks (in the thread's cache or the pools), addresses
// inside a block or pointers it never handed out.
TYPED_TEST(caching_test, AllocationInfoDescribesLiveAllocationsOnly) {
  for (const char* conf : {"", "thread_cache_mb:0", "expandable:1", "max_split_mb:2"}) {
    auto r = this->make(conf);
    stream first{this->device_};
    stream second{this->device_};
    auto& rng = test::rng();
    struct live_block {
      void* p;
      std::size_t bytes;
      stream_view s;
    };
    std::vector<live_block> live;
    std::vector<void*> freed;
    const std::size_t recurring[] = {512, 4096, 100000, 3 * MiB};
    for (int step = 0; step < 120; ++step) {
      if (live.empty() || rng() % 3 != 0) {
        const std::size_t bytes = step % 2 == 0 ? 1 + rng() % (4 * MiB) : recurring[rng() % 4];
        const stream_view s = rng() % 2 == 0 ? stream_view{first} : stream_view{second};
        live.push_back({r->allocate(bytes, s), bytes, s});
        std::erase(freed, live.back().p);
      } else {
        const auto victim = rng() % live.size();
        r->deallocate(live[victim].p, live[victim].bytes, live[victim].s);
        freed.push_back(live[victim].p);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
      }
    }
    // What another thread hears, asked at once (the pointer map, under the lock).
    std::vector<std::optional<mr::live_allocation>> elsewhere(live.size());
    std::thread{[&] {
      for (std::size_t i = 0; i < live.size(); ++i) elsewhere[i] = r->allocation_info(live[i].p);
    }}.join();
    std::size_t held = 0;
    for (std::size_t i = 0; i < live.size(); ++i) {
      const auto& [p, bytes, s] = live[i];
      const auto info = r->allocation_info(p);
      ASSERT_TRUE(info.has_value()) << conf << ": " << bytes << " bytes";
      EXPECT_EQ(info->requested_bytes, bytes) << conf;
      EXPECT_GE(info->block_bytes, (bytes + 511) / 512 * 512) << conf;
      EXPECT_EQ(info->block_bytes % mr::caching_resource::granularity, 0U) << conf;
      EXPECT_EQ(info->stream, s) << conf << ": the stream it was allocated on";
      ASSERT_TRUE(elsewhere[i].has_value()) << conf << ": another thread asked";
      EXPECT_EQ(elsewhere[i]->requested_bytes, info->requested_bytes) << conf;
      EXPECT_EQ(elsewhere[i]->block_bytes, info->block_bytes) << conf;
      EXPECT_EQ(elsewhere[i]->stream, info->stream) << conf;
      EXPECT_EQ(elsewhere[i]->pool, info->pool) << conf;
      if (info->block_bytes > 512) {
        EXPECT_EQ(r->allocation_info(static_cast<const std::byte*>(p) + 512), std::nullopt)
            << conf << ": an address inside a block is no allocation";
      }
      held += info->block_bytes;
    }
    EXPECT_EQ(held, r->statistics().allocated_bytes) << conf << ": block sizes are what statistics count";
    for (void* p : freed) EXPECT_EQ(r->allocation_info(p), std::nullopt) << conf << ": freed";
    int on_stack = 0;
    EXPECT_EQ(r->allocation_info(&on_stack), std::nullopt);
    EXPECT_EQ(r->allocation_info(nullptr), std::nullopt);
    // The snapshot (caches flushed) agrees block by block.
    const auto snap = r->snapshot();
    for (const auto& [p, bytes, s] : live) {
      const auto info = r->allocation_info(p);
      ASSERT_TRUE(info.has_value()) << conf << ": still live after the snapshot";
      const auto at = reinterpret_cast<std::uintptr_t>(p);
      const auto seg = std::find_if(snap.segments.begin(), snap.segments.end(),
                                    [at](const auto& g) { return at >= g.address && at < g.address + g.size; });
      ASSERT_NE(seg, snap.segments.end()) << conf;
      EXPECT_EQ(seg->pool, info->pool) << conf;
      const auto blk = std::find_if(seg->blocks.begin(), seg->blocks.end(),
                                    [&](const auto& b) { return seg->address + b.offset == at; });
      ASSERT_NE(blk, seg->blocks.end()) << conf;
      EXPECT_EQ(blk->state, mr::block_state::allocated) << conf;
      EXPECT_EQ(blk->size, info->block_bytes) << conf;
      EXPECT_EQ(blk->requested, info->requested_bytes) << conf;
      EXPECT_EQ(blk->stream, info->stream) << conf;
    }
    for (const auto& [p, bytes, s] : live) {
      r->deallocate(p, bytes, s);
      EXPECT_EQ(r->allocation_info(p), std::nullopt) << conf << ": freed";
    }
  }
}

// A block freed into the thread's cache stays in the pointer map; it is no
// live allocation, from this thread or another, until it is handed out again.
// The peak after reset_peaks (PyTorch's max_memory_allocated after
// reset_peak_memory_stats) counts a block that this thread freed into its
// cache before the reset and got back after it.
TYPED_TEST(caching_test, APeakAfterAResetCountsABlockFromThisThreadsCache) {
  auto r = this->make();
  stream s{this->device_};
  const std::size_t bytes = 1 + test::rng()() % (64 << 10);
  void* kept = r->allocate(4096, s);
  for (int i = 0; i < 3; ++i) r->deallocate(r->allocate(bytes, s), bytes, s);  // a bin, and a block in it
  r->reset_peaks();
  const auto at_reset = r->statistics();
  ASSERT_EQ(at_reset.peak_allocated_bytes, at_reset.allocated_bytes);
  const auto hits = r->statistics().thread_cache_hits;
  void* p = r->allocate(bytes, s);
  const auto during = r->statistics();
  r->deallocate(p, bytes, s);
  EXPECT_GT(r->statistics().thread_cache_hits, hits) << "the block came from the thread's cache";
  const auto after = r->statistics();
  EXPECT_EQ(after.allocated_bytes, at_reset.allocated_bytes);
  EXPECT_EQ(after.peak_allocated_bytes, during.allocated_bytes);
  EXPECT_EQ(after.peak_requested_bytes, at_reset.requested_bytes + bytes);
  r->deallocate(kept, 4096, s);
}

TYPED_TEST(caching_test, AllocationInfoIgnoresBlocksInAThreadsCache) {
  auto r = this->make();
  stream s{this->device_};
  const std::size_t bytes = 1 + test::rng()() % (64 << 10);
  for (int i = 0; i < 2; ++i) r->deallocate(r->allocate(bytes, s), bytes, s);  // the second miss makes a bin
  void* p = r->allocate(bytes, s);
  r->deallocate(p, bytes, s);
  void* again = r->allocate(bytes, s);
  ASSERT_EQ(again, p);
  const auto hits = r->statistics().thread_cache_hits;
  r->deallocate(p, bytes, s);
  EXPECT_EQ(r->allocation_info(p), std::nullopt);
  std::optional<mr::live_allocation> elsewhere;
  std::thread{[&] { elsewhere = r->allocation_info(p); }}.join();
  EXPECT_EQ(elsewhere, std::nullopt) << "another thread, through the pointer map";
  void* third = r->allocate(bytes, s);
  ASSERT_EQ(third, p);
  EXPECT_GT(r->statistics().thread_cache_hits, hits) << "the block came from the thread's cache";
  std::thread{[&] { elsewhere = r->allocation_info(p); }}.join();
  ASSERT_TRUE(elsewhere.has_value());
  EXPECT_EQ(elsewhere->requested_bytes, bytes);
  EXPECT_EQ(elsewhere->stream, stream_view{s});
  r->deallocate(p, bytes, s);
}

TYPED_TEST(caching_test, SnapshotParsesAndFollowsTheSchema) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  for (const char* conf : {"", "expandable:1"}) {
    auto r = this->make(conf);
    stream s{this->device_};
    stream other{this->device_};
    std::vector<std::pair<void*, std::size_t>> live;
    {
      mr::scoped_allocation_label label{"weights, layer \"1\""};
      live.emplace_back(r->allocate(300, s), 300);
      live.emplace_back(r->allocate(3 * MiB, s), 3 * MiB);
    }
    live.emplace_back(r->allocate(70000, s), 70000);
    void* freed = r->allocate(50000, s);
    r->deallocate(freed, 50000, s);
    void* pending = r->allocate(8000, s);
    r->record_stream(pending, other);
    stream_latch hold{other};
    r->deallocate(pending, 8000, s);

    const auto snap = r->snapshot();
    const nlohmann::json json = nlohmann::json::parse(snap.to_json(2));
    EXPECT_EQ(json["format"], "syncmem.snapshot/1");
    EXPECT_EQ(json["device"], to_string(this->device_));
    EXPECT_EQ(json["resource"], r->name());
    EXPECT_TRUE(
        std::regex_match(json["captured_at"].get<std::string>(), std::regex{R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"}));
    std::map<std::string, std::size_t> by_state;
    std::size_t reserved = 0;
    std::set<std::string> labels;
    std::uint64_t previous_end = 0;
    for (const nlohmann::json& seg : json["segments"]) {
      const auto address = std::stoull(seg["address"].get<std::string>(), nullptr, 16);
      EXPECT_GE(address, previous_end) << "segments overlap or are out of order";
      EXPECT_THAT((std::set<std::string>{"small", "large", "expandable"}), ::testing::Contains(seg["pool"]));
      std::size_t offset = 0;
      for (const nlohmann::json& b : seg["blocks"]) {
        EXPECT_EQ(b["offset"].get<std::size_t>(), offset) << "blocks must tile the segment";
        offset += b["size"].get<std::size_t>();
        by_state[b["state"]] += b["size"].get<std::size_t>();
        EXPECT_TRUE(b.contains("requested") && b.contains("label") && b.contains("stream"));
        if (b["state"] == "allocated") labels.insert(b["label"].get<std::string>());
      }
      EXPECT_EQ(offset, seg["size"].get<std::size_t>());
      reserved += seg["size"].get<std::size_t>();
      previous_end = address + seg["size"].get<std::uint64_t>();
    }
    EXPECT_EQ(json["totals"]["reserved"].get<std::size_t>(), reserved) << conf;
    EXPECT_EQ(json["totals"]["allocated"].get<std::size_t>(), by_state["allocated"]);
    EXPECT_EQ(json["totals"]["free"].get<std::size_t>(), by_state["free"]);
    EXPECT_EQ(json["totals"]["pending"].get<std::size_t>(), by_state["pending"]);
    EXPECT_EQ(by_state["allocated"], 512U + 3 * MiB + 70144U);
    EXPECT_GE(by_state["pending"], 8192U) << "the block used on the held stream must be pending";
    EXPECT_THAT(labels, ::testing::Contains("weights, layer \"1\""));
    hold.release();
    other.synchronize();
    for (auto [p, bytes] : live) r->deallocate(p, bytes, s);
  }
}

TYPED_TEST(caching_test, OutOfMemoryAtTheLimitSaysEverything) {
  auto r = this->make("limit_mb:64,thread_cache_mb:0");
  stream s{this->device_};
  void* big = r->allocate(40 * MiB, s);
  mr::scoped_allocation_label label{"activations"};
  try {
    (void)r->allocate(40 * MiB, s);
    FAIL() << "the limit did not hold";
  } catch (const out_of_memory& e) {
    const auto& info = e.info();
    EXPECT_EQ(info.requested, 40 * MiB);
    EXPECT_EQ(info.device, this->device_);
    EXPECT_EQ(info.label, "activations");
    EXPECT_EQ(info.resource, r->name());
    EXPECT_EQ(info.limit, 64 * MiB);
    EXPECT_EQ(info.reserved, 40 * MiB);
    EXPECT_EQ(info.in_use, 40 * MiB);
    EXPECT_TRUE(info.device_free.has_value());
    EXPECT_TRUE(info.device_total.has_value());
    EXPECT_TRUE(info.largest_free_block.has_value());
    EXPECT_THAT(e.what(), HasSubstr("limit"));
    EXPECT_THAT(e.what(), HasSubstr("'activations'"));
    EXPECT_THAT(e.what(), HasSubstr(to_string(this->device_)));
  }
  const auto st = r->statistics();
  EXPECT_EQ(st.ooms, 1U);
  EXPECT_EQ(st.oom_retries, 1U);
  // Still usable, and a higher limit lets it through.
  EXPECT_EQ(r->limit(), 64 * MiB);
  r->set_limit(128 * MiB);
  EXPECT_EQ(r->limit(), 128 * MiB);
  void* more = r->allocate(40 * MiB, s);
  r->deallocate(more, 40 * MiB, s);
  r->deallocate(big, 40 * MiB, s);
  r->set_limit(std::nullopt);
  EXPECT_EQ(r->limit(), std::nullopt);
  EXPECT_EQ(this->make("thread_cache_mb:0")->limit(), std::nullopt);
}

TYPED_TEST(caching_test, FragmentationIsNamedWhenItIsTheCause) {
  auto r = this->make("limit_mb:48,thread_cache_mb:0,compact:0");  // ordinary segments only
  stream s{this->device_};
  // One 48 MiB segment, cut into eight 6 MiB blocks; every other one freed:
  // 24 MiB free, in pieces of 6 MiB.
  void* whole = r->allocate(48 * MiB, s);
  r->deallocate(whole, 48 * MiB, s);
  std::vector<void*> pieces;
  for (int i = 0; i < 8; ++i) pieces.push_back(r->allocate(6 * MiB, s));
  for (int i = 0; i < 8; i += 2) r->deallocate(pieces[static_cast<std::size_t>(i)], 6 * MiB, s);
  try {
    (void)r->allocate(12 * MiB, s);
    FAIL() << "should not fit";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.info().largest_free_block, 6 * MiB);
    EXPECT_THAT(e.info().hint, HasSubstr("fragmentation"));
    EXPECT_THAT(e.info().hint, HasSubstr("expandable"));
  }
  for (int i = 1; i < 8; i += 2) r->deallocate(pieces[static_cast<std::size_t>(i)], 6 * MiB, s);
}

TYPED_TEST(caching_test, FailedDeviceAllocationsAreRetriedAfterFreeingTheCache) {
  std::unique_ptr<mr::memory_resource> raw;
  if (this->kind == device_kind::emulated) {
    raw = std::make_unique<mr::emulated_resource>(this->device_);
  } else {
    raw = std::make_unique<mr::cuda_resource>(this->device_);
  }
  mr::statistics_adaptor counted{*raw};
  mr::failure_adaptor failing{counted};
  auto r =
      std::make_unique<mr::caching_resource>(this->device_, mr::caching_options::parse("thread_cache_mb:0"), &failing);
  EXPECT_EQ(r->upstream(), &failing);
  stream s{this->device_};
  // Cache some memory: a wholly free segment, and a partly used one (2.5 of 4 MiB).
  const std::size_t b_bytes = 5 * MiB / 2;
  void* a = r->allocate(8 * MiB, s);
  void* b = r->allocate(b_bytes, s);
  const auto seed = fresh_seed();
  this->fill(s, b, b_bytes, seed);
  r->deallocate(a, 8 * MiB, s);
  // The next device allocation fails once: the cache is freed and it is retried.
  failing.set_predicate(mr::failure_adaptor::nth(failing.calls() + 1));
  void* c = r->allocate(20 * MiB, s);
  auto st = r->statistics();
  EXPECT_EQ(st.oom_retries, 1U);
  EXPECT_EQ(st.ooms, 0U);
  EXPECT_EQ(st.reserved_bytes, 4 * MiB + 20 * MiB) << "the free 8 MiB segment should have been released";
  // Every device allocation fails now: out_of_memory, and nothing else changes.
  failing.set_predicate(mr::failure_adaptor::always());
  EXPECT_THROW((void)r->allocate(30 * MiB, s), out_of_memory);
  st = r->statistics();
  EXPECT_EQ(st.ooms, 1U);
  EXPECT_EQ(st.allocated_bytes, b_bytes + 20 * MiB);
  EXPECT_TRUE(this->holds(s, b, b_bytes, seed));
  // What is cached still serves: the 1.5 MiB left of the 4 MiB segment.
  void* d = r->allocate(5 * MiB / 4, s);
  r->deallocate(d, 5 * MiB / 4, s);
  failing.set_predicate({});
  r->deallocate(b, b_bytes, s);
  r->deallocate(c, 20 * MiB, s);
  r->empty_cache();
  EXPECT_EQ(r->statistics().reserved_bytes, 0U);
  EXPECT_EQ(counted.statistics().bytes.current, 0) << "every segment went back to the upstream";
  r.reset();
  EXPECT_EQ(counted.statistics().allocations.current, 0);
}

TYPED_TEST(caching_test, ThreadCachesGoBackOnThreadExitAndEmptyCache) {
  auto r = this->make();
  const std::size_t bytes = 64 * 1024;
  stream s{this->device_};  // outlives the threads: their caches keep blocks for it
  auto loop = [&] {
    for (int i = 0; i < 10; ++i) {
      void* p = r->allocate(bytes, s);
      r->deallocate(p, bytes, s);
    }
  };
  std::thread{loop}.join();  // exits with a block in its cache
  auto st = r->statistics();
  EXPECT_GE(st.thread_cache_hits, 7U);
  EXPECT_EQ(st.allocations, 10U);
  EXPECT_EQ(st.deallocations, 10U);
  EXPECT_EQ(st.allocated_bytes, 0U);
  r->empty_cache();
  EXPECT_EQ(r->statistics().reserved_bytes, 0U) << "the exited thread's cache was not returned";

  // A live thread's cache is taken back by empty_cache.
  std::mutex m;
  std::condition_variable cv;
  bool cached = false;
  bool finish = false;
  std::thread worker{[&] {
    loop();
    std::unique_lock lock{m};
    cached = true;
    cv.notify_all();
    cv.wait(lock, [&] { return finish; });
  }};
  {
    std::unique_lock lock{m};
    cv.wait(lock, [&] { return cached; });
  }
  EXPECT_EQ(r->statistics().cached_bytes, r->statistics().reserved_bytes);
  EXPECT_GT(r->statistics().cached_bytes, 0U);
  r->empty_cache();
  EXPECT_EQ(r->statistics().reserved_bytes, 0U) << "a live thread's cache was not returned";
  {
    std::lock_guard lock{m};
    finish = true;
  }
  cv.notify_all();
  worker.join();
}

TYPED_TEST(caching_test, ThreadsMayOutliveTheResource) {
  auto r = this->make();
  std::mutex m;
  std::condition_variable cv;
  int stage = 0;
  stream s{this->device_};
  std::thread worker{[&] {
    for (int i = 0; i < 5; ++i) {
      void* p = r->allocate(4096, s);
      r->deallocate(p, 4096, s);
    }
    std::unique_lock lock{m};
    stage = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return stage == 2; });
  }};
  {
    std::unique_lock lock{m};
    cv.wait(lock, [&] { return stage == 1; });
  }
  r.reset();  // while the worker still has a cache of it
  {
    std::lock_guard lock{m};
    stage = 2;
  }
  cv.notify_all();
  worker.join();
}

TYPED_TEST(caching_test, ManyThreadsOnTheirOwnStreamsHitTheirOwnCaches) {
  auto r = this->make();
  constexpr int threads = 4;
  constexpr int pairs = 500;
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      stream s{this->device_};
      const std::size_t bytes = 64 * 1024 + static_cast<std::size_t>(t) * 512;
      void* first = r->allocate(bytes, s);
      const auto seed = fresh_seed();
      device_fill_pattern(s, first, bytes, seed);
      for (int i = 0; i < pairs; ++i) {
        void* p = r->allocate(bytes, s);
        r->deallocate(p, bytes, s);
      }
      if (!holds_pattern(memory_kind::device, s, first, bytes, seed)) ++failures;
      r->deallocate(first, bytes, s);
      s.synchronize();
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(failures.load(), 0);
  const auto st = r->statistics();
  EXPECT_EQ(st.allocations, static_cast<std::uint64_t>(threads * (pairs + 1)));
  EXPECT_EQ(st.allocated_bytes, 0U);
  EXPECT_EQ(st.live_allocations, 0U);
  EXPECT_GE(st.thread_cache_hits, static_cast<std::uint64_t>(threads * (pairs - 2)));
}

TYPED_TEST(caching_test, MemoryOfADestroyedStreamGoesToTheOthers) {
  auto r = this->make();
  stream keeper{this->device_};
  const std::size_t bytes = 6 * MiB;
  void* p = nullptr;
  {
    stream temporary{this->device_};
    p = r->allocate(bytes, temporary);
    device_sleep(temporary, std::chrono::milliseconds{20});
    device_fill_pattern(temporary, p, bytes, fresh_seed());
    r->deallocate(p, bytes, temporary);
  }  // destroyed with work pending: the allocator is told
  const auto reserved = r->statistics().reserved_bytes;
  void* q = r->allocate(bytes, keeper);
  EXPECT_EQ(q, p);
  EXPECT_EQ(r->statistics().reserved_bytes, reserved);
  const auto seed = fresh_seed();
  device_fill_pattern(keeper, q, bytes, seed);
  synchronize_device(this->device_);
  EXPECT_TRUE(holds_pattern(memory_kind::device, keeper, q, bytes, seed));
  r->deallocate(q, bytes, keeper);
  // A stream announced with release_stream is treated the same way.
  stream announced{this->device_};
  void* x = r->allocate(bytes, announced);
  r->deallocate(x, bytes, announced);
  r->release_stream(announced);
  announced.synchronize();
  void* y = r->allocate(bytes, keeper);
  EXPECT_EQ(y, x);
  r->deallocate(y, bytes, keeper);
}

TYPED_TEST(caching_test, GrowableSegmentsReuseIdlePagesInsteadOfGrowing) {
  auto r = this->make("expandable:1,thread_cache_mb:0");
  stream s{this->device_};
  void* first = r->allocate(20 * MiB, s);
  if (!r->expandable()) GTEST_SKIP() << "the device has no virtual memory management";
  void* second = r->allocate(20 * MiB, s);
  const auto seed = fresh_seed();
  device_fill_pattern(s, second, 20 * MiB, seed);
  r->deallocate(first, 20 * MiB, s);
  // 30 MiB does not fit the 20 MiB hole: the hole's pages move to the end.
  void* third = r->allocate(30 * MiB, s);
  auto st = r->statistics();
  EXPECT_LE(st.reserved_bytes, st.allocated_bytes + 2 * MiB) << "idle pages were not reused";
  EXPECT_LE(st.peak_reserved_bytes, 52 * MiB);
  EXPECT_TRUE(holds_pattern(memory_kind::device, s, second, 20 * MiB, seed)) << "remapping disturbed a live block";
  const auto seed3 = fresh_seed();
  device_fill_pattern(s, third, 30 * MiB, seed3);
  EXPECT_TRUE(holds_pattern(memory_kind::device, s, third, 30 * MiB, seed3));
  EXPECT_EQ(st.segments, 1U) << "the growable range counts once";
  const auto snap = r->snapshot();
  for (const auto& seg : snap.segments) {
    if (seg.size > MiB * 2) {
      EXPECT_EQ(seg.pool, mr::segment_pool::expandable);
    }
  }
  r->deallocate(second, 20 * MiB, s);
  r->deallocate(third, 30 * MiB, s);
  EXPECT_GT(r->trim(10 * MiB), 0U);
  EXPECT_LE(r->statistics().cached_bytes, 10 * MiB + 2 * MiB);
  r->empty_cache();
  st = r->statistics();
  EXPECT_EQ(st.reserved_bytes, 0U);
  EXPECT_EQ(st.cached_bytes, 0U);
  EXPECT_EQ(st.segments, 0U);
}

// A 4 MiB hole among 64 MiB in use is far less than a quarter of the reserve:
// only grow_from_idle moves its pages to where the range grows.
TYPED_TEST(caching_test, GrowFromIdleMovesEvenAFewIdlePages) {
  for (const bool from_idle : {false, true}) {
    auto r =
        this->make(from_idle ? "expandable:1,thread_cache_mb:0,grow_from_idle:1" : "expandable:1,thread_cache_mb:0");
    stream s{this->device_};
    void* low = r->allocate(32 * MiB, s);
    if (!r->expandable()) GTEST_SKIP() << "the device has no virtual memory management";
    void* hole = r->allocate(4 * MiB, s);
    void* high = r->allocate(32 * MiB, s);
    const auto seed = fresh_seed();
    device_fill_pattern(s, high, 32 * MiB, seed);
    r->deallocate(hole, 4 * MiB, s);
    void* grown = r->allocate(6 * MiB, s);  // does not fit the hole
    const auto st = r->statistics();
    EXPECT_EQ(st.peak_reserved_bytes, from_idle ? 70 * MiB : 74 * MiB) << "grow_from_idle:" << from_idle;
    EXPECT_TRUE(holds_pattern(memory_kind::device, s, high, 32 * MiB, seed)) << "remapping disturbed a live block";
    const auto seed2 = fresh_seed();
    device_fill_pattern(s, grown, 6 * MiB, seed2);
    EXPECT_TRUE(holds_pattern(memory_kind::device, s, grown, 6 * MiB, seed2));
    r->deallocate(grown, 6 * MiB, s);
    r->deallocate(high, 32 * MiB, s);
    r->deallocate(low, 32 * MiB, s);
  }
}

// With grow_from_idle, requests above 256 KiB come from the growable range
// (where idle pages move), not from the small blocks' 2 MiB segments.
TYPED_TEST(caching_test, GrowFromIdleTakesMidSizedRequestsFromTheRange) {
  for (const bool from_idle : {false, true}) {
    auto r =
        this->make(from_idle ? "expandable:1,thread_cache_mb:0,grow_from_idle:1" : "expandable:1,thread_cache_mb:0");
    stream s{this->device_};
    constexpr std::size_t KiB = 1024;
    const std::size_t mid = 256 * KiB + 512 + (rng()() % 512) * KiB;  // above 256 KiB, below 1 MiB
    r->deallocate(r->allocate(4 * MiB, s), 4 * MiB, s);               // a large block: the range is reserved
    if (!r->expandable()) GTEST_SKIP() << "the device has no virtual memory management";
    void* a = r->allocate(mid, s);
    void* b = r->allocate(256 * KiB, s);
    const auto seed = fresh_seed();
    device_fill_pattern(s, a, mid, seed);
    const auto pool_of = [&](const void* p) {
      for (const auto& seg : r->snapshot().segments) {
        const auto at = reinterpret_cast<std::uintptr_t>(p);
        if (at >= seg.address && at < seg.address + seg.size) return std::optional{seg.pool};
      }
      return std::optional<mr::segment_pool>{};
    };
    const auto expected = from_idle ? mr::segment_pool::expandable : mr::segment_pool::small;
    EXPECT_EQ(pool_of(a), expected) << mid << " bytes, grow_from_idle:" << from_idle;
    EXPECT_EQ(pool_of(b), mr::segment_pool::small) << "256 KiB, grow_from_idle:" << from_idle;
    EXPECT_EQ(r->allocation_info(a)->pool, expected) << "allocation_info agrees with the snapshot";
    EXPECT_EQ(r->allocation_info(b)->pool, mr::segment_pool::small);
    EXPECT_TRUE(holds_pattern(memory_kind::device, s, a, mid, seed));
    r->deallocate(a, mid, s);
    r->deallocate(b, 256 * KiB, s);
  }
}

// Free blocks of two streams that share a page: once the device is idle,
// empty_cache gives that page back too (it stayed mapped for good).
TYPED_TEST(caching_test, EmptyCacheGivesBackAPageThatFreeBlocksOfTwoStreamsShare) {
  auto r = this->make("expandable:1,thread_cache_mb:0");
  stream s{this->device_};
  stream other{this->device_};
  void* a = r->allocate(8 * MiB, other);
  if (!r->expandable()) GTEST_SKIP() << "the device has no virtual memory management";
  r->deallocate(a, 8 * MiB, other);
  const std::size_t bytes = 3 * MiB + 512 * (rng()() % 2048);  // not on a page boundary
  void* b = r->allocate(bytes, s);  // the start of other's free block: the rest stays other's
  EXPECT_EQ(b, a);
  const auto seed = fresh_seed();
  device_fill_pattern(s, b, bytes, seed);
  EXPECT_TRUE(holds_pattern(memory_kind::device, s, b, bytes, seed));
  r->deallocate(b, bytes, s);  // s's free block ends inside the page where other's begins
  r->empty_cache();
  const auto st = r->statistics();
  EXPECT_EQ(st.reserved_bytes, 0U);
  EXPECT_EQ(st.cached_bytes, 0U);
}

// expandable_large_page_mb: a growth of 256 MiB or more is mapped in 20 MiB
// pages, and with grow_from_idle one of them moves only when all of it is
// idle: the one a kept block shares stays, the wholly idle ones move to
// another stream's growth.
TYPED_TEST(caching_test, LargePagesBackBigGrowthsAndMoveOnlyWhenWhollyIdle) {
  auto r = this->make("expandable:1,thread_cache_mb:0,grow_from_idle:1,expandable_large_page_mb:20");
  stream s{this->device_};
  stream other{this->device_};
  void* big = r->allocate(300 * MiB, other);
  if (!r->expandable()) GTEST_SKIP() << "the device has no virtual memory management";
  const auto seed = fresh_seed();
  device_fill_pattern(other, big, 300 * MiB, seed);
  EXPECT_TRUE(holds_pattern(memory_kind::device, other, big, 300 * MiB, seed));
  r->deallocate(big, 300 * MiB, other);
  void* kept = r->allocate(30 * MiB, other);  // the first large page and half the second
  EXPECT_EQ(kept, big);
  const auto kept_seed = fresh_seed();
  device_fill_pattern(other, kept, 30 * MiB, kept_seed);
  // More than the 270 MiB left free: thirteen wholly idle large pages move, one is new.
  void* grown = r->allocate(280 * MiB, s);
  const auto st = r->statistics();
  EXPECT_EQ(st.peak_reserved_bytes, 320 * MiB);
  EXPECT_EQ(st.reserved_bytes, 320 * MiB);
  EXPECT_TRUE(holds_pattern(memory_kind::device, other, kept, 30 * MiB, kept_seed)) << "moving disturbed a live block";
  const auto grown_seed = fresh_seed();
  device_fill_pattern(s, grown, 280 * MiB, grown_seed);
  EXPECT_TRUE(holds_pattern(memory_kind::device, s, grown, 280 * MiB, grown_seed));
  r->deallocate(grown, 280 * MiB, s);
  r->deallocate(kept, 30 * MiB, other);
  r->empty_cache();
  EXPECT_EQ(r->statistics().reserved_bytes, 0U);
}

TYPED_TEST(caching_test, GrowingGivesBackSegmentsThatCannotServe) {
  for (const bool release : {true, false}) {
    auto r = this->make(release ? "thread_cache_mb:0" : "thread_cache_mb:0,release_before_grow:0");
    stream s{this->device_};
    void* small = r->allocate(100, s);  // a small segment, in use: never released
    void* a = r->allocate(8 * MiB, s);
    r->deallocate(a, 8 * MiB, s);
    void* b = r->allocate(20 * MiB, s);  // the free 8 MiB segment cannot serve it
    const auto st = r->statistics();
    EXPECT_EQ(st.reserved_bytes, 2 * MiB + (release ? 20 : 28) * MiB) << "release_before_grow:" << release;
    EXPECT_EQ(st.peak_reserved_bytes, 2 * MiB + 28 * MiB - (release ? 8 * MiB : 0));
    r->deallocate(b, 20 * MiB, s);
    r->deallocate(small, 100, s);
  }
}

// A block split from a segment leaves the rest of the segment to that
// segment's blocks; in the growable range its idle pages serve any request.
TYPED_TEST(caching_test, PastHalfTheLimitLargeBlocksGrowInTheRange) {
  for (const bool compact : {true, false}) {
    auto r = this->make(compact ? "limit_mb:64,thread_cache_mb:0" : "limit_mb:64,thread_cache_mb:0,compact:0");
    stream s{this->device_};
    void* held = r->allocate(30 * MiB, s);  // an ordinary segment: 30 of 64 MiB reserved
    EXPECT_FALSE(r->expandable());
    void* a = r->allocate(20 * MiB, s);  // past half the limit
    if (!r->expandable() && compact) {
      GTEST_SKIP() << to_string(this->device_) << " has no virtual memory management";
    }
    EXPECT_EQ(r->expandable(), compact);
    r->deallocate(a, 20 * MiB, s);
    const auto seed = fresh_seed();
    void* kept = r->allocate(8 * MiB, s);  // split from the 20 MiB just freed: 12 MiB free beside it
    this->fill(s, kept, 8 * MiB, seed);
    if (!compact) {
      // The free 12 MiB belong to the segment; growing by 16 MiB would pass the limit.
      EXPECT_THROW((void)r->allocate(16 * MiB, s), out_of_memory);
    } else {
      void* b = r->allocate(16 * MiB, s);
      const auto other = fresh_seed();
      this->fill(s, b, 16 * MiB, other);
      EXPECT_TRUE(this->holds(s, b, 16 * MiB, other));
      EXPECT_LE(r->statistics().reserved_bytes, 64 * MiB);
      r->deallocate(b, 16 * MiB, s);
    }
    EXPECT_TRUE(this->holds(s, kept, 8 * MiB, seed));
    r->deallocate(kept, 8 * MiB, s);
    r->deallocate(held, 30 * MiB, s);
  }
}

// Out of memory with the range in use: a hole too small for the request
// gives its pages back, and the range grows by them at its end.
TYPED_TEST(caching_test, OutOfMemoryInTheRangeTakesTheIdlePagesOfAHole) {
  auto r = this->make("limit_mb:64,thread_cache_mb:0");
  stream s{this->device_};
  void* held = r->allocate(30 * MiB, s);
  std::vector<void*> pieces;
  for (int i = 0; i < 4; ++i) pieces.push_back(r->allocate(8 * MiB, s));  // in the range: 62 MiB reserved
  if (!r->expandable()) GTEST_SKIP() << to_string(this->device_) << " has no virtual memory management";
  std::vector<std::uint64_t> seeds;
  for (void* p : pieces) {
    seeds.push_back(fresh_seed());
    this->fill(s, p, 8 * MiB, seeds.back());
  }
  r->deallocate(pieces[1], 8 * MiB, s);  // a hole of 8 MiB between live pieces
  void* b = r->allocate(10 * MiB, s);    // 10 MiB more would pass the limit
  const auto other = fresh_seed();
  this->fill(s, b, 10 * MiB, other);
  EXPECT_TRUE(this->holds(s, b, 10 * MiB, other));
  for (const std::size_t i : {0U, 2U, 3U}) EXPECT_TRUE(this->holds(s, pieces[i], 8 * MiB, seeds[i])) << i;
  const auto st = r->statistics();
  EXPECT_LE(st.peak_reserved_bytes, 64 * MiB);
  EXPECT_EQ(st.oom_retries, 1U);
  EXPECT_EQ(st.ooms, 0U);
  r->deallocate(b, 10 * MiB, s);
  for (const std::size_t i : {0U, 2U, 3U}) r->deallocate(pieces[i], 8 * MiB, s);
  r->deallocate(held, 30 * MiB, s);
}

TYPED_TEST(caching_test, MaxSplitKeepsOversizeBlocksWhole) {
  auto r = this->make("max_split_mb:4,thread_cache_mb:0");
  stream s{this->device_};
  void* huge = r->allocate(16 * MiB, s);
  r->deallocate(huge, 16 * MiB, s);
  const auto reserved = r->statistics().reserved_bytes;
  void* medium = r->allocate(2 * MiB, s);  // may not cut the oversize block
  EXPECT_GT(r->statistics().reserved_bytes, reserved);
  void* again = r->allocate(15 * MiB, s);  // an oversize request takes it whole
  EXPECT_EQ(again, huge);
  r->deallocate(again, 15 * MiB, s);
  r->deallocate(medium, 2 * MiB, s);
}

TEST(CachingResource, RefusesAnUpstreamOfAnotherDevice) {
  mr::emulated_resource other{device_id::emulated(0)};
  EXPECT_THROW(mr::caching_resource(device_id::emulated(1), {}, &other), logic_error);
  EXPECT_THROW(mr::caching_resource(device_id::emulated(7)), logic_error);
}

TEST(CachingResource, AskingForMoreThanAnyDeviceHasIsOutOfMemory) {
  mr::caching_resource r{device_id::emulated(0)};
  auto s = default_stream(device_id::emulated(0));
  EXPECT_THROW((void)r.allocate(std::size_t{1} << 62, s), out_of_memory);
  EXPECT_THROW((void)r.allocate(std::numeric_limits<std::size_t>::max(), s), out_of_memory);
  void* p = r.allocate(100, s);
  r.deallocate(p, 100, s);
}

TEST(CachingResource, ForeignAndDoubleFreesAreIgnored) {
  mr::caching_resource r{device_id::emulated(0), mr::caching_options::parse("thread_cache_mb:0")};
  auto s = default_stream(device_id::emulated(0));
  int local = 0;
  r.deallocate(&local, sizeof local, s);
  void* p = r.allocate(1000, s);
  r.deallocate(p, 1000, s);
  r.deallocate(p, 1000, s);
  EXPECT_EQ(r.statistics().deallocations, 1U);
  EXPECT_EQ(r.statistics().allocated_bytes, 0U);
}

}  // namespace
}  // namespace syncmem::test
