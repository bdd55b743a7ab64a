// record_stream's bookkeeping, on an emulated device: a block freed while
// another stream may use it waits for that stream.
#include "mr/caching/pending_frees.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>

#include "device_ops.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::mr::detail::caching {
namespace {

using namespace std::chrono_literals;
const device_id device = device_id::emulated(0);

class pending_frees_test : public ::testing::Test {
 protected:
  ~pending_frees_test() override {
    synchronize_device(device);
    events_.destroy_all();
  }

  // A handed-out block at a made-up address (the streams only run sleeps).
  block* handed_out() {
    segment_.first = nullptr;
    block* b = pools_.blocks().make();
    b->ptr = 1 << 20;
    b->size = 4096;
    b->seg = &segment_;
    segment_.first = b;
    b->status = block_status::allocated;
    return b;
  }

  caching_events events_{device};
  stream_pools pools_{std::numeric_limits<std::size_t>::max()};
  pending_frees pending_{events_, pools_, "pending_frees_test"};
  segment segment_{1 << 20, 4096, pool_kind::small, false, stream_handle{}, nullptr};
  stream freeing_{device};
  stream user_{device};
};

TEST_F(pending_frees_test, ABlockUsedElsewhereWaitsForThatStream) {
  block* b = handed_out();
  pending_.add_use(b, user_.view().handle());
  pending_.add_use(b, user_.view().handle());
  EXPECT_EQ(b->uses.size(), 1U);
  EXPECT_TRUE(b->needs_slow_free.load());
  syncmem::test::device_sleep(user_, 50ms);
  stream_pool& pool = pools_.pool_for(freeing_.view().handle());
  ASSERT_TRUE(pending_.hold(b, freeing_.view().handle(), pool));
  EXPECT_FALSE(b->needs_slow_free.load());
  EXPECT_EQ(b->status, block_status::pending);
  EXPECT_EQ(pending_.bytes(), 4096U);
  pending_.collect();
  EXPECT_FALSE(pending_.empty()) << "the user stream is still busy";
  pending_.synchronize();
  pending_.collect();
  EXPECT_TRUE(pending_.empty());
  EXPECT_EQ(pending_.bytes(), 0U);
  EXPECT_EQ(b->status, block_status::free);
  EXPECT_EQ(pool.small.bytes(), 4096U);
}

TEST_F(pending_frees_test, AUseOnTheFreeingStreamItselfNeedsNoWait) {
  block* b = handed_out();
  pending_.add_use(b, freeing_.view().handle());
  stream_pool& pool = pools_.pool_for(freeing_.view().handle());
  EXPECT_FALSE(pending_.hold(b, freeing_.view().handle(), pool));
  EXPECT_TRUE(b->uses.empty());
  EXPECT_TRUE(pending_.empty());
}

TEST_F(pending_frees_test, ADestroyedUserStreamLeavesAnEventBehind) {
  block* b = handed_out();
  pending_.add_use(b, user_.view().handle());
  syncmem::test::device_sleep(user_, 50ms);
  pending_.stream_gone(user_.view().handle());
  EXPECT_TRUE(b->uses.empty());
  EXPECT_EQ(b->pending_uses, 1U);
  stream_pool& pool = pools_.pool_for(freeing_.view().handle());
  ASSERT_TRUE(pending_.hold(b, freeing_.view().handle(), pool)) << "the event recorded then still counts";
  stream_pool& idle = pools_.idle();
  pending_.move_owner(pool, idle);
  EXPECT_EQ(b->owner, &idle);
  pending_.synchronize();
  pending_.collect();
  EXPECT_EQ(idle.small.bytes(), 4096U);
}

// The event recorded at a stream's destruction may pass while the block is
// still handed out: the block stays out of every pool until its free, which
// then has nothing left to wait for.
TEST_F(pending_frees_test, AHandedOutBlockWaitsForItsFreeWhenItsUsesHavePassed) {
  block* b = handed_out();
  pending_.add_use(b, user_.view().handle());
  syncmem::test::device_sleep(user_, 5ms);
  pending_.stream_gone(user_.view().handle());
  EXPECT_FALSE(pending_.empty());
  pending_.synchronize();
  pending_.collect();
  EXPECT_TRUE(pending_.empty());
  EXPECT_EQ(b->status, block_status::allocated);
  EXPECT_EQ(pending_.bytes(), 0U);
  stream_pool& pool = pools_.pool_for(freeing_.view().handle());
  EXPECT_EQ(pool.small.bytes(), 0U);
  EXPECT_FALSE(pending_.hold(b, freeing_.view().handle(), pool)) << "its one use has passed";
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
