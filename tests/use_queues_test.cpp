// The uses of freed blocks that must complete before reuse, per stream, on
// either kind of device: a block is ready once its last use has passed, never
// before; a stream is settled by one query when its newest use has passed.
#include "mr/caching/use_queues.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backend/cuda_stream_handles.hpp"
#include "device_ops.hpp"
#include "syncmem/event.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::mr::detail::caching {
namespace {

using syncmem::test::device_kind_names;
using syncmem::test::device_kinds;
using syncmem::test::device_test;
using syncmem::test::rng;
using syncmem::test::stream_latch;

struct test_block {
  int id = 0;
  std::uint32_t pending_uses = 0;
};

// syncmem::event, with the queries counted.
struct counted_events {
  using event_type = event;
  std::shared_ptr<int> queries = std::make_shared<int>(0);
  std::shared_ptr<int> released = std::make_shared<int>(0);

  bool passed(const event& e) const {
    ++*queries;
    return e.ready();
  }
  static void wait(const event& e) { e.synchronize(); }
  void release(event&& e) const noexcept {
    ++*released;
    event gone{std::move(e)};
  }
};

using queues = use_queues<test_block, counted_events>;

template <class Kind>
class UseQueues : public device_test<Kind> {
 protected:
  // Queues a use of `b` that completes with an event recorded on `s` now,
  // under `s`'s key (or under `key`, standing in for a reused handle).
  void add(stream_view s, test_block& b, std::optional<stream_key> key = std::nullopt) {
    event e{s.device()};
    e.record(s);
    uses_.add(key.value_or(stream_key{s.device(), s.handle()}), std::move(e), &b);
  }

  // The ids of the blocks a poll finds ready, in the order it finds them.
  std::vector<int> poll() {
    std::vector<int> ready;
    uses_.poll([&ready](test_block* b) { ready.push_back(b->id); });
    return ready;
  }

  counted_events policy_;
  queues uses_{policy_};
};
TYPED_TEST_SUITE(UseQueues, device_kinds, device_kind_names);

// Blocks used on random streams, one of them held: exactly the blocks with no
// use on the held stream are ready, and the rest once it is let go.
TYPED_TEST(UseQueues, ABlockIsReadyOnlyOnceItsLastUseHasPassed) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  constexpr int stream_count = 3;
  std::vector<std::unique_ptr<stream>> streams;
  for (int i = 0; i < stream_count; ++i) streams.push_back(std::make_unique<stream>(this->dev()));
  const int block_count = 4 + static_cast<int>(rng()() % 12);
  std::vector<test_block> blocks(static_cast<std::size_t>(block_count));
  stream_latch hold{*streams[0]};
  std::vector<bool> uses_held(blocks.size(), false);
  std::size_t total_uses = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].id = static_cast<int>(i);
    auto mask = 1 + rng()() % ((1U << stream_count) - 1);  // at least one stream
    if (i == 0) mask |= 1U;  // and the held stream at least once, so that something waits for it
    for (int s = 0; s < stream_count; ++s) {
      if ((mask & (1U << s)) == 0) continue;
      this->add(*streams[static_cast<std::size_t>(s)], blocks[i]);
      ++total_uses;
      if (s == 0) uses_held[i] = true;
    }
    EXPECT_EQ(blocks[i].pending_uses, static_cast<std::uint32_t>(std::popcount(mask)));
  }
  EXPECT_EQ(this->uses_.size(), total_uses);
  for (int s = 1; s < stream_count; ++s) streams[static_cast<std::size_t>(s)]->synchronize();

  std::vector<int> expected;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (!uses_held[i]) expected.push_back(static_cast<int>(i));
  }
  std::vector<int> ready = this->poll();
  std::sort(ready.begin(), ready.end());
  EXPECT_EQ(ready, expected) << "a block with a use on the held stream was ready, or one without was not";
  EXPECT_FALSE(this->uses_.empty());

  hold.release();
  streams[0]->synchronize();
  ready = this->poll();
  EXPECT_EQ(ready.size(), blocks.size() - expected.size());
  for (const auto& b : blocks) EXPECT_EQ(b.pending_uses, 0U);
  EXPECT_TRUE(this->uses_.empty());
  EXPECT_EQ(*this->policy_.released, static_cast<int>(total_uses)) << "each event goes back once";
  EXPECT_TRUE(this->poll().empty());
}

TYPED_TEST(UseQueues, OneQuerySettlesAStreamWhoseNewestUseHasPassed) {
  stream s{this->dev()};
  const std::size_t n = 2 + rng()() % 30;
  std::vector<test_block> blocks(n);
  for (std::size_t i = 0; i < n; ++i) {
    blocks[i].id = static_cast<int>(i);
    this->add(s, blocks[i]);
  }
  s.synchronize();
  const std::vector<int> ready = this->poll();
  EXPECT_EQ(*this->policy_.queries, 1);
  ASSERT_EQ(ready.size(), n);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(ready[i], static_cast<int>(i)) << "in the order of the uses";
  EXPECT_TRUE(this->uses_.empty());
}

TYPED_TEST(UseQueues, APollStopsAtAStreamsFirstBusyUse) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream s{this->dev()};
  test_block before{1};
  test_block after{2};
  this->add(s, before);
  s.synchronize();
  stream_latch hold{s};
  this->add(s, after);
  EXPECT_EQ(this->poll(), std::vector<int>{1});
  EXPECT_EQ(this->uses_.size(), 1U);
  hold.release();
  s.synchronize();
  EXPECT_EQ(this->poll(), std::vector<int>{2});
}

// Two streams' uses under one key (a handle that names a different stream
// on every thread, or one reused by a new stream): the newest use having
// passed says nothing of the older ones.
TYPED_TEST(UseQueues, NoShortcutWhereAKeyNamesMoreThanOneStream) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream busy{this->dev()};
  stream done{this->dev()};
  const stream_key per_thread{this->dev(), syncmem::detail::cuda_per_thread_stream()};
  const stream_key reused{this->dev(), busy.view().handle()};
  test_block blocks[4] = {{0}, {1}, {2}, {3}};
  stream_latch hold{busy};
  this->add(busy, blocks[0], per_thread);
  this->add(done, blocks[1], per_thread);
  this->add(busy, blocks[2], reused);
  this->uses_.stream_gone(reused);  // and a new stream gets the handle
  this->add(done, blocks[3], reused);
  done.synchronize();
  EXPECT_TRUE(this->poll().empty()) << "a use still queued on the held stream was taken as passed";
  EXPECT_EQ(this->uses_.size(), 4U);
  hold.release();
  busy.synchronize();
  EXPECT_EQ(this->poll().size(), 4U);
  EXPECT_TRUE(this->uses_.empty());

  // Once its queue has emptied, a key is one stream's again.
  for (int i = 0; i < 3; ++i) this->add(busy, blocks[i], reused);
  busy.synchronize();
  *this->policy_.queries = 0;
  EXPECT_EQ(this->poll().size(), 3U);
  EXPECT_EQ(*this->policy_.queries, 1);
}

TYPED_TEST(UseQueues, WaitAllThenPollRetiresEveryUse) {
  stream s{this->dev()};
  const std::size_t n = 1 + rng()() % 8;
  std::vector<test_block> blocks(n);
  for (std::size_t i = 0; i < n; ++i) {
    blocks[i].id = static_cast<int>(i);
    syncmem::test::device_sleep(s, std::chrono::microseconds{500});
    this->add(s, blocks[i]);
    this->add(s, blocks[i]);
  }
  int visits = 0;
  this->uses_.for_each_block([&visits](const test_block*) { ++visits; });
  EXPECT_EQ(visits, static_cast<int>(2 * n));
  this->uses_.wait_all();
  EXPECT_EQ(this->poll().size(), n) << "each block once, after its second use";
}

TYPED_TEST(UseQueues, DrainWaitsAndRetiresEverything) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream s{this->dev()};
  stream other{this->dev()};
  test_block a{1};
  test_block b{2};
  stream_latch hold{s};
  this->add(s, a);
  this->add(other, a);
  event before_last{this->dev()};
  before_last.record(s);
  this->add(s, b);
  std::vector<int> ready = syncmem::test::while_held(hold, [this] {
    std::vector<int> seen;
    this->uses_.drain([&seen](test_block* x) { seen.push_back(x->id); });
    return seen;
  });
  EXPECT_TRUE(before_last.ready()) << "drain returned before the held stream's uses had passed";
  std::sort(ready.begin(), ready.end());
  EXPECT_EQ(ready, (std::vector<int>{1, 2}));
  EXPECT_TRUE(this->uses_.empty());
  EXPECT_EQ(a.pending_uses + b.pending_uses, 0U);
  EXPECT_EQ(*this->policy_.released, 3);
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
