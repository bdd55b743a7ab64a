// A caching_resource's segment observers (mr/segment_observer.hpp): told of
// every ordinary segment when added, of each segment obtained, and of each
// segment before it is given back, while its memory is still the device's;
// likewise of the growable range's pages as they are mapped and unmapped, and
// of graph pools' memory, marked with the pool's id.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "device_ops.hpp"
#include "syncmem/graph.hpp"
#include "syncmem/graph_pool.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/segment_observer.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Stretches of addresses, start -> end, apart from each other.
using stretches = std::map<std::uintptr_t, std::uintptr_t>;

// Adds [at, at + bytes) to `s`; false when it is empty or overlaps one there.
bool add_stretch(stretches& s, const void* at, std::size_t bytes) {
  const auto start = reinterpret_cast<std::uintptr_t>(at);
  const auto next = s.lower_bound(start);
  if (bytes == 0 || (next != s.end() && next->first < start + bytes) ||
      (next != s.begin() && std::prev(next)->second > start)) {
    return false;
  }
  s.emplace(start, start + bytes);
  return true;
}

// Whether [p, p + bytes) lies in `s` (stretches side by side count as one).
bool covered(const stretches& s, const void* p, std::size_t bytes) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = s.upper_bound(at);
  if (it == s.begin()) return false;
  --it;
  std::uintptr_t reached = it->second;
  while (reached < at + bytes && ++it != s.end() && it->first == reached) reached = it->second;
  return reached >= at + bytes;
}

// Records what it is told, and whether released memory was still device memory then.
class recording_observer final : public mr::segment_observer {
 public:
  explicit recording_observer(device_id device) : device_{device} {}
  void segment_added(void* base, std::size_t bytes) noexcept override {
    std::lock_guard lock{mutex_};
    if (!live_.emplace(reinterpret_cast<std::uintptr_t>(base), bytes).second) problems_.push_back("added twice");
    ++added_;
  }
  void segment_releasing(void* base, std::size_t bytes) noexcept override {
    std::lock_guard lock{mutex_};
    const auto it = live_.find(reinterpret_cast<std::uintptr_t>(base));
    if (it == live_.end() || it->second != bytes) problems_.push_back("released a segment never added");
    if (it != live_.end()) live_.erase(it);
    try {
      const auto a = get_pointer_attributes(base);
      if (a.kind != memory_kind::device || a.device != device_) problems_.push_back("released after it was freed");
    } catch (...) {
      problems_.push_back("released after it was freed");
    }
    ++released_;
  }
  void range_mapped(void* at, std::size_t bytes) noexcept override {
    std::lock_guard lock{mutex_};
    if (!add_stretch(mapped_, at, bytes)) problems_.push_back("mapped twice");
  }
  void range_unmapping(void* at, std::size_t bytes) noexcept override {
    std::lock_guard lock{mutex_};
    const auto start = reinterpret_cast<std::uintptr_t>(at);
    const auto end = start + bytes;
    auto it = mapped_.upper_bound(start);
    if (it == mapped_.begin() || std::prev(it)->second < end) {
      problems_.push_back("unmapped pages never mapped");
      return;
    }
    --it;
    const auto [first, last] = *it;  // the stretch loses [start, end) and keeps what lies either side
    mapped_.erase(it);
    if (first < start) mapped_.emplace(first, start);
    if (end < last) mapped_.emplace(end, last);
  }
  void graph_pool_added(std::uint64_t pool, void* at, std::size_t bytes, bool) noexcept override {
    std::lock_guard lock{mutex_};
    if (destroyed_) problems_.push_back("told of a graph pool after the resource went");
    if (!add_stretch(graph_[pool], at, bytes)) problems_.push_back("graph pool memory added twice");
  }
  void graph_pool_releasing(std::uint64_t pool, void* at, std::size_t bytes, bool) noexcept override {
    std::lock_guard lock{mutex_};
    if (destroyed_) problems_.push_back("told of a graph pool after the resource went");
    // What goes is told of at once: stretches added side by side go as one.
    const auto start = reinterpret_cast<std::uintptr_t>(at);
    auto& held = graph_[pool];
    auto it = held.find(start);
    std::uintptr_t reached = start;
    while (it != held.end() && it->first == reached && reached < start + bytes) {
      reached = it->second;
      it = held.erase(it);
    }
    if (reached != start + bytes) problems_.push_back("released graph pool memory never added");
    if (held.empty()) graph_.erase(pool);
  }
  void resource_destroyed() noexcept override { destroyed_ = true; }
  // The bytes of graph pool `pool` it was told of, and whether [p, p + n) lies in them.
  [[nodiscard]] std::size_t graph_bytes(std::uint64_t pool) const {
    std::lock_guard lock{mutex_};
    std::size_t total = 0;
    if (const auto it = graph_.find(pool); it != graph_.end()) {
      for (const auto& [start, end] : it->second) total += end - start;
    }
    return total;
  }
  [[nodiscard]] bool in_graph_pool(std::uint64_t pool, const void* p, std::size_t n) const {
    std::lock_guard lock{mutex_};
    const auto g = graph_.find(pool);
    return g != graph_.end() && covered(g->second, p, n);
  }
  [[nodiscard]] std::size_t graph_pools() const {
    std::lock_guard lock{mutex_};
    return graph_.size();
  }
  [[nodiscard]] std::size_t mapped_bytes() const {
    std::lock_guard lock{mutex_};
    std::size_t total = 0;
    for (const auto& [start, end] : mapped_) total += end - start;
    return total;
  }
  // Whether [p, p + bytes) is mapped, as it was told.
  [[nodiscard]] bool mapped(const void* p, std::size_t bytes) const {
    std::lock_guard lock{mutex_};
    return covered(mapped_, p, bytes);  // stretches mapped by growths one after another count as one
  }
  [[nodiscard]] bool destroyed() const { return destroyed_; }
  [[nodiscard]] std::map<std::uintptr_t, std::size_t> live() const {
    std::lock_guard lock{mutex_};
    return live_;
  }
  [[nodiscard]] int added() const { return added_; }
  [[nodiscard]] int released() const { return released_; }
  [[nodiscard]] std::vector<std::string> problems() const {
    std::lock_guard lock{mutex_};
    return problems_;
  }
  // Whether [p, p + bytes) lies within one segment it was told of.
  [[nodiscard]] bool covers(const void* p, std::size_t bytes) const {
    std::lock_guard lock{mutex_};
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    for (const auto& [base, size] : live_) {
      if (at >= base && at + bytes <= base + size) return true;
    }
    return false;
  }

 private:
  device_id device_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> live_;
  stretches mapped_;                          // of the growable range
  std::map<std::uint64_t, stretches> graph_;  // by graph pool
  std::vector<std::string> problems_;
  int added_ = 0;
  int released_ = 0;
  bool destroyed_ = false;
};

template <class Kind>
class segment_observers_test : public device_test<Kind> {};
TYPED_TEST_SUITE(segment_observers_test, device_kinds, device_kind_names);

TYPED_TEST(segment_observers_test, SeesEverySegmentComeAndGoWhileItIsStillValid) {
  const auto device = this->dev();
  auto s = default_stream(device);
  auto observer = std::make_shared<recording_observer>(device);
  {
    mr::caching_resource resource{device, mr::caching_options::parse("thread_cache_mb:0")};
    void* before = resource.allocate(3 * MiB, s);  // a segment held before the observer comes
    resource.add_segment_observer(observer);
    EXPECT_EQ(observer->added(), 1);
    EXPECT_TRUE(observer->covers(before, 3 * MiB));

    std::vector<std::pair<void*, std::size_t>> blocks;
    for (const std::size_t bytes : {512 * std::size_t{1}, 64 * std::size_t{1} << 10, 5 * MiB, 17 * MiB}) {
      blocks.emplace_back(resource.allocate(bytes, s), bytes);
      EXPECT_TRUE(observer->covers(blocks.back().first, bytes)) << bytes << " bytes";
    }
    EXPECT_EQ(static_cast<std::uint64_t>(observer->live().size()), resource.statistics().segments);

    for (auto [p, bytes] : blocks) resource.deallocate(p, bytes, s);
    resource.empty_cache();  // every segment but the one `before` lies in goes back
    EXPECT_EQ(observer->live().size(), 1U);
    EXPECT_TRUE(observer->covers(before, 3 * MiB));
    EXPECT_EQ(observer->added() - observer->released(), 1);
    resource.deallocate(before, 3 * MiB, s);
    void* again = resource.allocate(3 * MiB, s);  // from the cached segment: nothing new
    EXPECT_EQ(observer->live().size(), 1U);
    resource.deallocate(again, 3 * MiB, s);
    EXPECT_FALSE(observer->destroyed());
  }  // the destructor releases the last one, telling the observer first
  EXPECT_TRUE(observer->destroyed());
  EXPECT_TRUE(observer->live().empty());
  EXPECT_EQ(observer->added(), observer->released());
  EXPECT_THAT(observer->problems(), ::testing::IsEmpty());
}

TYPED_TEST(segment_observers_test, SeesTheGrowableRangesPagesMappedAndUnmapped) {
  const auto device = this->dev();
  auto s = default_stream(device);
  auto observer = std::make_shared<recording_observer>(device);
  std::size_t before_bytes = 0;
  {
    mr::caching_resource resource{device, mr::caching_options::parse("expandable:1,thread_cache_mb:0")};
    auto& r = rng();
    before_bytes = std::uniform_int_distribution<std::size_t>{3 * MiB, 9 * MiB}(r);
    void* before = resource.allocate(before_bytes, s);  // pages mapped before the observer comes
    resource.add_segment_observer(observer);
    const auto snap = resource.snapshot();
    if (std::none_of(snap.segments.begin(), snap.segments.end(),
                     [](const auto& seg) { return seg.pool == mr::segment_pool::expandable; })) {
      resource.deallocate(before, before_bytes, s);
      GTEST_SKIP() << "the device has no growable range";
    }
    EXPECT_TRUE(observer->mapped(before, before_bytes));

    std::vector<std::pair<void*, std::size_t>> blocks;
    for (int i = 0; i < 12; ++i) {
      const std::size_t bytes = std::uniform_int_distribution<std::size_t>{MiB, 40 * MiB}(r);
      blocks.emplace_back(resource.allocate(bytes, s), bytes);
      EXPECT_TRUE(observer->mapped(blocks.back().first, bytes) || observer->covers(blocks.back().first, bytes))
          << bytes << " bytes";
    }
    const std::size_t at_peak = observer->mapped_bytes();
    EXPECT_GE(at_peak, before_bytes);
    for (auto [p, bytes] : blocks) resource.deallocate(p, bytes, s);
    resource.empty_cache();  // every page but those `before` lies in is unmapped
    EXPECT_TRUE(observer->mapped(before, before_bytes));
    EXPECT_LT(observer->mapped_bytes(), at_peak);
    EXPECT_LE(observer->mapped_bytes(), resource.statistics().reserved_bytes);
    resource.deallocate(before, before_bytes, s);
  }  // the destructor tells the observer of the pages still mapped
  EXPECT_TRUE(observer->destroyed());
  EXPECT_EQ(observer->mapped_bytes(), 0U);
  EXPECT_THAT(observer->problems(), ::testing::IsEmpty());
}

// A graph pool's memory is told of with its pool's id, apart from the ordinary
// segments: as it grows in captures, all at once to an observer added later,
// and before it goes with the pool's last graph; an observer removed meanwhile
// hears nothing more, and a pool that outlives the resource tells nobody.
TYPED_TEST(segment_observers_test, SeesGraphPoolsMemoryMarkedWithTheirPool) {
  const auto device = this->dev();
  stream s{device};
  auto early = std::make_shared<recording_observer>(device);
  auto late = std::make_shared<recording_observer>(device);
  auto& r = rng();
  std::optional<graph_pool> kept;  // outlives the resource
  {
    mr::caching_resource resource{device};
    resource.add_segment_observer(early);
    std::optional<graph_pool> pool{std::in_place};
    std::vector<std::pair<void*, std::size_t>> blocks;
    std::vector<graph> graphs;
    for (int capture = 0; capture < 3; ++capture) {
      begin_capture(s, *pool);
      for (const std::size_t bytes : {std::uniform_int_distribution<std::size_t>{1, MiB}(r),
                                      std::uniform_int_distribution<std::size_t>{MiB + 1, 9 * MiB}(r)}) {
        blocks.emplace_back(resource.allocate(bytes, s), bytes);
        device_add_bytes(s, blocks.back().first, bytes, 1);
      }
      graphs.push_back(end_capture(s));
    }
    const std::uint64_t id = pool->id();
    for (const auto& [p, bytes] : blocks) {
      EXPECT_TRUE(early->in_graph_pool(id, p, bytes)) << bytes << " bytes";
      EXPECT_FALSE(early->covers(p, bytes)) << "a graph pool's block in an ordinary segment";
    }
    EXPECT_EQ(early->graph_bytes(id), pool->reserved_bytes());

    resource.add_segment_observer(late);  // told of what the pool holds at once
    EXPECT_EQ(late->graph_bytes(id), pool->reserved_bytes());
    for (const auto& [p, bytes] : blocks) EXPECT_TRUE(late->in_graph_pool(id, p, bytes));
    EXPECT_TRUE(resource.remove_segment_observer(late.get()));

    s.synchronize();
    for (const auto& [p, bytes] : blocks) resource.deallocate(p, bytes, s);
    graphs.clear();
    pool.reset();  // its memory goes: told before
    EXPECT_EQ(early->graph_pools(), 0U);
    EXPECT_EQ(late->graph_pools(), 1U) << "a removed observer was told";

    kept.emplace();
    begin_capture(s, *kept);
    void* p = resource.allocate(3 * MiB, s);
    device_add_bytes(s, p, 3 * MiB, 1);
    graph g = end_capture(s);
    EXPECT_EQ(early->graph_bytes(kept->id()), kept->reserved_bytes());
    s.synchronize();
    resource.deallocate(p, 3 * MiB, s);
  }
  EXPECT_TRUE(early->destroyed());
  kept.reset();  // after the resource: nobody is told
  EXPECT_THAT(early->problems(), ::testing::IsEmpty());
  EXPECT_THAT(late->problems(), ::testing::IsEmpty());
}

TYPED_TEST(segment_observers_test, RemovedObserversHearNothing) {
  const auto device = this->dev();
  auto s = default_stream(device);
  mr::caching_resource resource{device};
  auto observer = std::make_shared<recording_observer>(device);
  resource.add_segment_observer(observer);
  EXPECT_TRUE(resource.remove_segment_observer(observer.get()));
  EXPECT_FALSE(resource.remove_segment_observer(observer.get()));
  void* p = resource.allocate(9 * MiB, s);
  resource.deallocate(p, 9 * MiB, s);
  resource.empty_cache();
  EXPECT_EQ(observer->added(), 0);
  EXPECT_EQ(observer->released(), 0);
  EXPECT_THROW(resource.add_segment_observer(nullptr), logic_error);
}

}  // namespace
}  // namespace syncmem::test
