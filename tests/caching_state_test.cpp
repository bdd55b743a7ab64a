// ctest-labels: threaded
// The caching allocator as its parts work together: streams are told apart
// by their lifetimes, not by their handles.
#include "mr/caching/caching_state.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "device_ops.hpp"
#include "memory_pattern.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::test {

namespace {

using namespace std::chrono_literals;
constexpr std::size_t MiB = std::size_t{1} << 20;

template <class Kind>
class caching_streams : public device_test<Kind> {};
TYPED_TEST_SUITE(caching_streams, device_kinds, device_kind_names);

// A destroyed stream's handle may come back for the next stream made (on
// emulated devices it usually does). Memory freed on the old stream, with
// work still queued, must not reach the new one as if the work were its own.
// (Emulated devices run a stream's queued work before destroying it; CUDA
// does not wait, so there the test also covers work still running.)
TYPED_TEST(caching_streams, ANewStreamDoesNotInheritTheQueuedWorkOfADestroyedOne) {
  const device_id device = this->dev();
  for (const char* conf : {"", "thread_cache_mb:0", "expandable:1"}) {
    for (const std::size_t bytes : {std::size_t{4096}, 3 * MiB}) {
      mr::caching_resource r{device, mr::caching_options::parse(conf)};
      void* p = nullptr;
      {
        stream a{device};
        for (int i = 0; i < 3; ++i) r.deallocate(r.allocate(bytes, a), bytes, a);  // a per-thread bin for (a, bytes)
        p = r.allocate(bytes, a);
        device_sleep(a, 40ms);
        device_fill_pattern(a, p, bytes, fresh_seed());  // still queued when a is destroyed
        r.deallocate(p, bytes, a);
      }
      stream b{device};
      void* q = r.allocate(bytes, b);
      const auto seed = fresh_seed();
      device_fill_pattern(b, q, bytes, seed);
      synchronize_device(device);
      EXPECT_TRUE(holds_pattern(memory_kind::device, b, q, bytes, seed))
          << conf << ", " << bytes << " bytes: work queued on the destroyed stream overwrote the new one's";
      r.deallocate(q, bytes, b);
    }
  }
}

TYPED_TEST(caching_streams, ReleasedStreamsBlocksGoToOthersAfterTheirWork) {
  const device_id device = this->dev();
  mr::caching_resource r{device};
  stream keeper{device};
  stream a{device};
  const std::size_t bytes = 2 * MiB;
  void* p = r.allocate(bytes, a);
  device_sleep(a, 40ms);
  device_fill_pattern(a, p, bytes, fresh_seed());
  r.deallocate(p, bytes, a);
  r.release_stream(a);
  void* q = r.allocate(bytes, keeper);
  const auto seed = fresh_seed();
  device_fill_pattern(keeper, q, bytes, seed);
  synchronize_device(device);
  EXPECT_TRUE(holds_pattern(memory_kind::device, keeper, q, bytes, seed));
  EXPECT_GE(r.statistics().stream_waits, q == p ? 1U : 0U);
  r.deallocate(q, bytes, keeper);
}

}  // namespace
}  // namespace syncmem::test
