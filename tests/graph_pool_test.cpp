// ctest-labels: threaded
// Allocation inside stream capture: a caching_resource serves a capturing
// stream from the capture's private pool (graph_pool), reuses a block freed in
// the capture only where stream order proves it safe, keeps the pool's memory
// out of ordinary allocations while a graph lives and gives it all back after;
// graphs captured into one pool share it; a block of the cache freed inside a
// capture is held until the graph goes. Each step is replayed on fresh random
// inputs with every output byte checked, on both kinds of device.
#include "syncmem/graph_pool.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "backend_block.hpp"
#include "core/capture_registry.hpp"
#include "counting_resource.hpp"
#include "device_ops.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/graph.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::test {
namespace {

using bytes_t = std::vector<std::uint8_t>;

using pinned = backend_block;  // pinned host memory of the device's backend

bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto* x = static_cast<const std::uint8_t*>(a);
  const auto* y = static_cast<const std::uint8_t*>(b);
  return x < y + bn && y < x + an;
}

template <class Kind>
class GraphPools : public device_test<Kind> {};
TYPED_TEST_SUITE(GraphPools, device_kinds, device_kind_names);

// A step that allocates, frees, copies host<->device through the engine and
// runs a kernel (a host function on emulated devices): its blocks come from
// the capture's pool, a block freed in the capture is reused on the same
// stream, ordinary allocations never land in the pool while the graph lives,
// and after the graph every byte goes back to the upstream.
TYPED_TEST(GraphPools, ACapturedStepAllocatesFromItsPoolAndReplaysOnFreshInputs) {
  scoped_emulated_delay delay{std::chrono::microseconds{20}};
  counting_device_resource upstream{this->dev()};
  std::optional<mr::caching_resource> resource{std::in_place, this->dev(), mr::caching_options{}, &upstream};
  stream s{this->dev()};
  const std::size_t n = 100'003;
  pinned input{this->dev(), n}, output{this->dev(), n};
  const auto delta = static_cast<std::uint8_t>(rng()() | 1u);
  std::optional<graph_pool> pool{std::in_place};

  begin_capture(s, *pool);
  void* first = resource->allocate(n, s);
  (void)copy_async(first, input.data(), n, s);
  void* second = resource->allocate(n, s);
  (void)copy_async(second, first, n, s);
  resource->deallocate(first, n, s);
  void* third = resource->allocate(n, s);  // freed in this capture on this stream: reused
  device_add_bytes(s, second, n, delta);
  (void)copy_async(third, second, n, s);
  (void)copy_async(output.data(), third, n, s);
  resource->deallocate(second, n, s);
  resource->deallocate(third, n, s);
  std::optional<graph> step{end_capture(s)};
  EXPECT_EQ(third, first) << "a block freed in the capture on the allocating stream is reusable";
  EXPECT_NE(second, first);
  EXPECT_TRUE(step->pool() == *pool);
  EXPECT_GE(pool->reserved_bytes(), 2 * n);
  EXPECT_EQ(pool->allocated_bytes(), 0u);

  // Ordinary allocations meanwhile, of every size around the captured ones.
  std::vector<std::pair<void*, std::size_t>> ordinary;
  for (std::size_t size : {n, n / 2, n + 1, std::size_t{512}, 2 * n, std::size_t{1} << 20}) {
    for (int i = 0; i < 3; ++i) ordinary.emplace_back(resource->allocate(size, s), size);
  }
  for (const auto& [p, size] : ordinary) {
    EXPECT_FALSE(overlaps(p, size, first, n)) << "an ordinary allocation reuses the graph's memory";
    EXPECT_FALSE(overlaps(p, size, second, n)) << "an ordinary allocation reuses the graph's memory";
  }
  for (const auto& [p, size] : ordinary) resource->deallocate(p, size, s);

  for (int round = 0; round < 20; ++round) {
    const bytes_t source = random_bytes(n);
    input.write(source);
    step->launch(s);
    s.synchronize();
    const bytes_t out = output.read();
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], static_cast<std::uint8_t>(source[i] + delta)) << "launch " << round << ", byte " << i;
    }
  }

  const std::size_t reserved = pool->reserved_bytes();
  step.reset();
  EXPECT_EQ(pool->reserved_bytes(), reserved) << "the handle keeps the pool";
  pool.reset();
  resource->empty_cache();
  EXPECT_EQ(upstream.live.load(), 0) << "the pool's segments must go back once its graphs and handles are gone";
  resource.reset();
  EXPECT_EQ(upstream.live.load(), 0);
}

// In the capture that allocated it, a block freed on another stream (one that
// is not captured) is not reused: stream order does not prove the graph done
// with it. Once that capture is over, a later one into the pool may reuse it.
TYPED_TEST(GraphPools, AFreeOnAnotherStreamIsNotReusedByTheSameCapture) {
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()}, other{this->dev()};
  const std::size_t n = 65'536;
  graph_pool pool;
  begin_capture(s, pool);
  void* a = resource.allocate(n, s);
  resource.deallocate(a, n, other);
  void* b = resource.allocate(n, s);
  EXPECT_NE(b, a);
  resource.deallocate(b, n, s);
  graph g1 = end_capture(s);
  begin_capture(s, pool);
  void* c = resource.allocate(n, s);
  EXPECT_TRUE(c == a || c == b) << "a later capture into the pool reuses what the earlier one freed";
  resource.deallocate(c, n, s);
  graph g2 = end_capture(s);
  begin_capture(s);  // a pool of its own
  void* d = resource.allocate(n, s);
  EXPECT_NE(d, a);
  EXPECT_NE(d, b);
  resource.deallocate(d, n, s);
  graph g3 = end_capture(s);
  EXPECT_FALSE(g3.pool() == pool);
}

// A block of the capture that another stream uses (record_stream) and that is
// freed before that stream joins back: the capture does not hand it out again,
// on any stream (the other stream may still read it at that point of the
// graph); a later capture into the pool may.
TYPED_TEST(GraphPools, ABlockAnotherStreamUsesIsNotReusedByTheCaptureThatFreesIt) {
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()}, other{this->dev()};
  const std::size_t n = 4096 + rng()() % 4096;
  graph_pool pool;
  begin_capture(s, pool);
  void* a = resource.allocate(n, s);
  resource.record_stream(a, other);
  resource.deallocate(a, n, s);
  void* b = resource.allocate(n, s);
  EXPECT_NE(b, a) << "a block another stream may still read was handed out again in the same capture";
  resource.deallocate(b, n, s);
  void* c = resource.allocate(n, s);
  EXPECT_EQ(c, b) << "without another stream's use, a block freed on the stream is reused at once";
  resource.deallocate(c, n, s);
  graph first = end_capture(s);
  begin_capture(s, pool);
  std::vector<void*> later{resource.allocate(n, s), resource.allocate(n, s)};
  EXPECT_THAT(later, ::testing::UnorderedElementsAre(a, b)) << "a later capture reuses both";
  for (void* p : later) resource.deallocate(p, n, s);
  graph second = end_capture(s);
}

// A block allocated during a capture is a graph pool's: allocation_info says
// so, with its request and stream, until it is freed.
TYPED_TEST(GraphPools, AllocationInfoKnowsBlocksOfGraphPools) {
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()};
  const std::size_t n = 1 + rng()() % (5 << 20);
  void* ordinary = resource.allocate(n, s);
  begin_capture(s);
  void* captured = resource.allocate(n, s);
  const auto info = resource.allocation_info(captured);
  const auto before = resource.allocation_info(ordinary);
  resource.deallocate(captured, n, s);
  const auto freed = resource.allocation_info(captured);
  graph g = end_capture(s);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->pool, mr::segment_pool::graph);
  EXPECT_EQ(info->requested_bytes, n);
  EXPECT_GE(info->block_bytes, n);
  EXPECT_EQ(info->stream, stream_view{s});
  EXPECT_EQ(freed, std::nullopt);
  ASSERT_TRUE(before.has_value());
  EXPECT_NE(before->pool, mr::segment_pool::graph) << "allocated before the capture";
  EXPECT_EQ(before->requested_bytes, n);
  resource.deallocate(ordinary, n, s);
  s.synchronize();
}

// Two graphs captured into one pool, the second reusing the first's freed
// block, launched in capture order on fresh inputs: both outputs right.
TYPED_TEST(GraphPools, GraphsSharingAPoolRunInCaptureOrder) {
  scoped_emulated_delay delay{std::chrono::microseconds{20}};
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()};
  const std::size_t n = 40'961;
  pinned in1{this->dev(), n}, out1{this->dev(), n}, in2{this->dev(), n}, out2{this->dev(), n};
  graph_pool pool;
  begin_capture(s, pool);
  void* a = resource.allocate(n, s);
  (void)copy_async(a, in1.data(), n, s);
  device_add_bytes(s, a, n, 1);
  (void)copy_async(out1.data(), a, n, s);
  resource.deallocate(a, n, s);
  graph g1 = end_capture(s);
  begin_capture(s, g1.pool());
  void* b = resource.allocate(n, s);
  (void)copy_async(b, in2.data(), n, s);
  device_add_bytes(s, b, n, 2);
  (void)copy_async(out2.data(), b, n, s);
  resource.deallocate(b, n, s);
  graph g2 = end_capture(s);
  EXPECT_EQ(b, a) << "the second capture reuses the block the first freed";
  for (int round = 0; round < 10; ++round) {
    const bytes_t x = random_bytes(n), y = random_bytes(n);
    in1.write(x);
    in2.write(y);
    g1.launch(s);
    g2.launch(s);
    s.synchronize();
    const bytes_t o1 = out1.read(), o2 = out2.read();
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(o1[i], static_cast<std::uint8_t>(x[i] + 1)) << "round " << round << ", byte " << i;
      ASSERT_EQ(o2[i], static_cast<std::uint8_t>(y[i] + 2)) << "round " << round << ", byte " << i;
    }
  }
}

// A block of the ordinary cache, freed on the capturing stream, is read by
// the graph at every launch: it is not handed out again while the graph
// lives, and goes back to the cache after.
TYPED_TEST(GraphPools, ABlockOfTheCacheFreedInACaptureIsHeldUntilTheGraphGoes) {
  counting_device_resource upstream{this->dev()};
  std::optional<mr::caching_resource> resource{std::in_place, this->dev(), mr::caching_options{}, &upstream};
  stream s{this->dev()};
  const std::size_t n = 32'768;
  pinned input{this->dev(), n}, output{this->dev(), n};
  const bytes_t contents = random_bytes(n);
  input.write(contents);
  void* x = resource->allocate(n, s);
  copy(x, input.data(), n, s);
  begin_capture(s);
  (void)copy_async(output.data(), x, n, s);
  resource->deallocate(x, n, s);
  std::optional<graph> g{end_capture(s)};
  std::vector<void*> ordinary;
  for (int i = 0; i < 8; ++i) ordinary.push_back(resource->allocate(n, s));
  for (void* p : ordinary) EXPECT_FALSE(overlaps(p, n, x, n)) << "a block the graph reads was handed out again";
  for (void* p : ordinary) resource->deallocate(p, n, s);
  for (int round = 0; round < 3; ++round) {
    output.write(random_bytes(n));
    g->launch(s);
    s.synchronize();
    ASSERT_EQ(output.read(), contents) << "launch " << round;
  }
  g.reset();
  resource->empty_cache();
  EXPECT_EQ(upstream.live.load(), 0) << "the held block must go back to the cache, and from there to the device";
  resource.reset();
}

// Random interleavings of captures (into fresh or shared pools), replays,
// ordinary allocations and graph destruction: every replay's output right,
// no ordinary allocation inside a live graph's blocks, nothing left after.
TYPED_TEST(GraphPools, RandomInterleavingsOfCapturesReplaysAndOrdinaryWork) {
  counting_device_resource upstream{this->dev()};
  std::optional<mr::caching_resource> resource{std::in_place, this->dev(), mr::caching_options{}, &upstream};
  stream s{this->dev()};
  auto& r = rng();
  struct captured {
    graph g;
    std::unique_ptr<pinned> in, out;
    std::size_t n;
    std::uint8_t delta;
    std::vector<std::pair<void*, std::size_t>> blocks;  // what the graph uses
  };
  std::vector<captured> graphs;
  std::vector<std::pair<void*, std::size_t>> ordinary;
  std::optional<graph_pool> shared{std::in_place};
  auto size_of = [&] { return std::size_t{512} + r() % 200'000; };
  for (int step = 0; step < 60; ++step) {
    const auto action = r() % 5;
    if (action == 0 || graphs.empty()) {
      captured c;
      c.n = size_of();
      c.delta = static_cast<std::uint8_t>(r());
      c.in = std::make_unique<pinned>(this->dev(), c.n);
      c.out = std::make_unique<pinned>(this->dev(), c.n);
      if (r() % 2 == 0) {
        begin_capture(s, *shared);
      } else {
        begin_capture(s);
      }
      void* a = resource->allocate(c.n, s);
      (void)copy_async(a, c.in->data(), c.n, s);
      device_add_bytes(s, a, c.n, c.delta);
      void* b = resource->allocate(c.n, s);
      (void)copy_async(b, a, c.n, s);
      resource->deallocate(a, c.n, s);
      (void)copy_async(c.out->data(), b, c.n, s);
      resource->deallocate(b, c.n, s);
      c.g = end_capture(s);
      c.blocks = {{a, c.n}, {b, c.n}};
      graphs.push_back(std::move(c));
    } else if (action == 1) {
      // Graphs sharing a pool run in capture order: launch them all, in order.
      std::vector<bytes_t> inputs;
      for (auto& c : graphs) {
        inputs.push_back(random_bytes(c.n));
        c.in->write(inputs.back());
      }
      for (auto& c : graphs) c.g.launch(s);
      s.synchronize();
      for (std::size_t k = 0; k < graphs.size(); ++k) {
        const bytes_t out = graphs[k].out->read();
        for (std::size_t i = 0; i < graphs[k].n; ++i) {
          ASSERT_EQ(out[i], static_cast<std::uint8_t>(inputs[k][i] + graphs[k].delta))
              << "step " << step << ", graph " << k << ", byte " << i;
        }
      }
    } else if (action == 2) {
      const std::size_t size = size_of();
      void* p = resource->allocate(size, s);
      for (const auto& c : graphs) {
        for (const auto& [q, qn] : c.blocks) {
          ASSERT_FALSE(overlaps(p, size, q, qn)) << "step " << step << ": an ordinary block inside a graph's block";
        }
      }
      ordinary.emplace_back(p, size);
    } else if (action == 3 && !ordinary.empty()) {
      const auto k = r() % ordinary.size();
      resource->deallocate(ordinary[k].first, ordinary[k].second, s);
      ordinary.erase(ordinary.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (action == 4 && graphs.size() > 1) {
      graphs.erase(graphs.begin() + static_cast<std::ptrdiff_t>(r() % graphs.size()));
    }
  }
  s.synchronize();
  for (const auto& [p, size] : ordinary) resource->deallocate(p, size, s);
  graphs.clear();
  shared.reset();
  resource->empty_cache();
  EXPECT_EQ(upstream.live.load(), 0) << "graphs and pools gone: every segment back";
  resource.reset();
}

// While a stream is captured, the resource serves other streams from its
// cache as usual, growing it where needed (on CUDA, without failing the
// capture open on this thread), and what they get works in the graph too.
TYPED_TEST(GraphPools, OtherStreamsAreServedAsUsualDuringACapture) {
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()}, other{this->dev()};
  const std::size_t n = 4111;
  pinned input{this->dev(), n}, output{this->dev(), n};
  graph_pool pool;
  begin_capture(s, pool);
  void* elsewhere = resource.allocate(n, other);
  ASSERT_NE(elsewhere, nullptr);
  EXPECT_EQ(pool.reserved_bytes(), 0u) << "an allocation on a stream that is not captured came from the pool";
  (void)copy_async(elsewhere, input.data(), n, s);
  (void)copy_async(output.data(), elsewhere, n, s);
  graph step = end_capture(s);
  for (int round = 0; round < 3; ++round) {
    const bytes_t source = random_bytes(n);
    input.write(source);
    step.launch(s);
    s.synchronize();
    ASSERT_EQ(output.read(), source) << "launch " << round;
  }
  step = graph{};
  resource.deallocate(elsewhere, n, other);
  EXPECT_EQ(pool.reserved_bytes(), 0u);
}

// A capture forks to a second stream through an event: allocations on the
// forked stream come from the capture's pool too, and kernels on both streams
// replay in the captured order.
TYPED_TEST(GraphPools, AForkedStreamAllocatesFromTheCapturesPool) {
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()}, side{this->dev()};
  const std::size_t n = 77'777;
  pinned input{this->dev(), n}, out_main{this->dev(), n}, out_side{this->dev(), n};
  graph_pool pool;
  begin_capture(s, pool);
  void* a = resource.allocate(n, s);
  (void)copy_async(a, input.data(), n, s);
  event forked{this->dev()};
  forked.record(s);
  side.wait(forked);
  EXPECT_TRUE(is_capturing(side));
  void* b = resource.allocate(n, side);
  const auto b_info = resource.allocation_info(b);
  ASSERT_TRUE(b_info.has_value());
  EXPECT_EQ(b_info->pool, mr::segment_pool::graph) << "the forked stream's allocation comes from the capture's pool";
  (void)copy_async(b, a, n, side);  // both streams only read `a` until they join
  device_add_bytes(side, b, n, 3);
  void* c = resource.allocate(n, s);
  (void)copy_async(c, a, n, s);
  device_add_bytes(s, c, n, 5);
  (void)copy_async(out_side.data(), b, n, side);
  event joined{this->dev()};
  joined.record(side);
  s.wait(joined);
  (void)copy_async(out_main.data(), c, n, s);
  resource.deallocate(b, n, s);
  resource.deallocate(c, n, s);
  resource.deallocate(a, n, s);
  graph g = end_capture(s);
  for (int round = 0; round < 10; ++round) {
    const bytes_t x = random_bytes(n);
    input.write(x);
    g.launch(s);
    s.synchronize();
    const bytes_t m = out_main.read(), d = out_side.read();
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(m[i], static_cast<std::uint8_t>(x[i] + 5)) << "round " << round << ", byte " << i;
      ASSERT_EQ(d[i], static_cast<std::uint8_t>(x[i] + 3)) << "round " << round << ", byte " << i;
    }
  }
}

// A block that a forked stream used (record_stream) is not reused in the
// capture that freed it until the graph orders the allocating stream after
// that stream's work (the streams joined); then it is, as PyTorch's
// graph_capture_record_stream_reuse does. Every launch checks every byte.
TYPED_TEST(GraphPools, ABlockAForkedStreamUsedIsReusedOnceTheStreamsJoin) {
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()}, side{this->dev()};
  const std::size_t n = 4096 + rng()() % 65536;
  pinned input{this->dev(), n}, output{this->dev(), n};
  graph_pool pool;
  begin_capture(s, pool);
  void* a = resource.allocate(n, s);
  (void)copy_async(a, input.data(), n, s);
  event forked{this->dev()};
  forked.record(s);
  side.wait(forked);
  void* b = resource.allocate(n, side);
  (void)copy_async(b, a, n, side);
  device_add_bytes(side, b, n, 3);
  resource.record_stream(a, side);
  resource.deallocate(a, n, s);
  void* before_join = resource.allocate(n, s);
  EXPECT_NE(before_join, a) << "reused while the forked stream may still read it";
  event joined{this->dev()};
  joined.record(side);
  s.wait(joined);
  void* after_join = resource.allocate(n, s);
  EXPECT_EQ(after_join, a) << "the streams joined: the graph orders the forked stream's reads first";
  (void)copy_async(after_join, b, n, s);
  device_add_bytes(s, after_join, n, 5);
  (void)copy_async(output.data(), after_join, n, s);
  for (void* p : {b, before_join, after_join}) resource.deallocate(p, n, s);
  graph g = end_capture(s);
  for (int round = 0; round < 10; ++round) {
    const bytes_t x = random_bytes(n);
    input.write(x);
    g.launch(s);
    s.synchronize();
    const bytes_t out = output.read();
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], static_cast<std::uint8_t>(x[i] + 8)) << "round " << round << ", byte " << i;
    }
  }
}

// A block cached for a stream that is being captured is not handed to
// another stream meanwhile: ordering that stream after the captured one
// would record an event into the capture and pull the other stream into it.
TYPED_TEST(GraphPools, AnotherStreamDoesNotTakeTheCapturedStreamsCachedBlocks) {
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()}, other{this->dev()};
  const std::size_t n = 123'457;
  void* cached = resource.allocate(n, s);
  resource.deallocate(cached, n, s);
  begin_capture(s);
  void* p = resource.allocate(n, other);
  EXPECT_NE(p, cached);
  EXPECT_FALSE(is_capturing(other)) << "the other stream was pulled into the capture";
  resource.deallocate(p, n, other);
  graph g = end_capture(s);
}

// A capture another library begins itself (PyTorch's CUDAGraph) is announced
// first with a filter of the streams it covers: until the capture runs the
// filter refuses and allocations are ordinary; while it runs, the covered
// stream allocates from the pool and reuses what it freed, other streams do
// not; the graph replays on fresh inputs, and the pool's memory goes back
// once the capture is over, the handle is gone and its last block is freed.
TYPED_TEST(GraphPools, AnExternalCaptureAllocatesThroughItsStreamFilter) {
  scoped_emulated_delay delay{std::chrono::microseconds{20}};
  counting_device_resource upstream{this->dev()};
  std::optional<mr::caching_resource> resource{std::in_place, this->dev(), mr::caching_options{}, &upstream};
  stream s{this->dev()}, other{this->dev()};
  stream_handle const handle = stream_view{s}.handle();
  auto& backend = detail::backend_for(this->dev());
  auto& graphs = detail::require_graphs(backend, "begin_capture");
  const int index = this->dev().index();
  const std::size_t n = 70'001;
  pinned input{this->dev(), n}, output{this->dev(), n};
  const auto delta = static_cast<std::uint8_t>(rng()() | 1u);
  std::optional<graph_pool> pool{std::in_place};
  int asked = 0;
  const std::uint64_t token =
      detail::external_capture_began(this->dev(), detail::graph_pool_access::state(*pool), [&](stream_handle h) {
        ++asked;
        device_guard guard{this->dev()};
        return h == handle && backend.stream_capturing(index, h);
      });

  void* before = resource->allocate(n, s);  // announced, not yet begun: ordinary
  EXPECT_GT(asked, 0) << "the filter decides";
  EXPECT_EQ(pool->reserved_bytes(), 0u);
  resource->deallocate(before, n, s);
  s.synchronize();

  graphs.begin_capture(index, handle);
  void* a = resource->allocate(n, s);
  EXPECT_GE(pool->reserved_bytes(), n) << "the covered stream allocates from the pool";
  (void)copy_async(a, input.data(), n, s);
  void* b = resource->allocate(n, s);
  (void)copy_async(b, a, n, s);
  resource->deallocate(a, n, s);
  void* c = resource->allocate(n, s);
  EXPECT_EQ(c, a) << "freed in the capture on the allocating stream: reused";
  device_add_bytes(s, b, n, delta);
  (void)copy_async(c, b, n, s);
  (void)copy_async(output.data(), c, n, s);
  const std::size_t reserved = pool->reserved_bytes();
  void* elsewhere = resource->allocate(n, other);  // not covered: the cache
  EXPECT_EQ(pool->reserved_bytes(), reserved);
  EXPECT_FALSE(overlaps(elsewhere, n, a, n) || overlaps(elsewhere, n, b, n));
  resource->deallocate(elsewhere, n, other);
  resource->deallocate(c, n, s);
  const detail::graph_handle captured = graphs.end_capture(index, handle);
  detail::external_capture_ended(token);

  void* after = resource->allocate(n, s);  // the capture is over: ordinary again
  EXPECT_EQ(pool->reserved_bytes(), reserved);
  EXPECT_FALSE(overlaps(after, n, a, n) || overlaps(after, n, b, n)) << "the graph's memory is reused outside it";
  resource->deallocate(after, n, s);

  for (int round = 0; round < 10; ++round) {
    const bytes_t source = random_bytes(n);
    input.write(source);
    graphs.launch_graph(index, captured, handle);
    s.synchronize();
    const bytes_t out = output.read();
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], static_cast<std::uint8_t>(source[i] + delta)) << "launch " << round << ", byte " << i;
    }
  }
  graphs.destroy_graph(index, captured);
  pool.reset();
  EXPECT_GT(upstream.live.load(), 0) << "`b` is live: its pool stays";
  resource->deallocate(b, n, s);
  resource->empty_cache();
  EXPECT_EQ(upstream.live.load(), 0) << "the pool's segments go back with its last block";
  resource.reset();
}

// CUDA graph trees warm up by allocating to a pool from a stream that is not
// capturing (PyTorch's beginAllocateCurrentStreamToPool): no graph records
// what is freed there, so an ordinary block freed on it goes back to the
// cache at once, and a block of the pool is reused by the pool at once.
TYPED_TEST(GraphPools, AStreamAllocatingToAPoolWithoutCapturingHoldsNothingItFrees) {
  counting_device_resource upstream{this->dev()};
  std::optional<mr::caching_resource> resource{std::in_place, this->dev(), mr::caching_options{}, &upstream};
  stream s{this->dev()};
  stream_handle const handle = stream_view{s}.handle();
  const std::size_t n = 30'000 + rng()() % 30'000;
  pinned input{this->dev(), n}, output{this->dev(), n};
  void* ordinary = resource->allocate(n, s);
  std::optional<graph_pool> pool{std::in_place};
  const std::uint64_t token = detail::external_capture_began(this->dev(), detail::graph_pool_access::state(*pool),
                                                             [&](stream_handle h) { return h == handle; });
  void* a = resource->allocate(n, s);
  EXPECT_GE(pool->reserved_bytes(), n) << "the covered stream allocates from the pool";
  EXPECT_FALSE(is_capturing(s));
  resource->deallocate(ordinary, n, s);
  resource->deallocate(a, n, s);
  void* b = resource->allocate(n, s);
  EXPECT_EQ(b, a) << "freed in the pool outside any capture: reused at once";
  const bytes_t contents = random_bytes(n);
  input.write(contents);
  (void)copy_async(b, input.data(), n, s);
  (void)copy_async(output.data(), b, n, s);
  s.synchronize();
  EXPECT_EQ(output.read(), contents);
  resource->deallocate(b, n, s);
  detail::external_capture_ended(token);
  void* again = resource->allocate(n, s);
  EXPECT_EQ(again, ordinary) << "the ordinary block was held for a graph that never captured";
  resource->deallocate(again, n, s);
  pool.reset();
  resource->empty_cache();
  EXPECT_EQ(upstream.live.load(), 0);
  resource.reset();
}

// CUDA graph trees: after recording a graph on one path, the pool is put
// back as a checkpoint found it and a graph on another path is recorded in
// the memory the first path's outputs held. Both graphs replay right on
// fresh inputs; a checkpoint whose block is not the pool's is refused whole.
TYPED_TEST(GraphPools, ARestoredCheckpointHasExactlyTheBlocksLiveThen) {
  scoped_emulated_delay delay{std::chrono::microseconds{20}};
  counting_device_resource upstream{this->dev()};
  std::optional<mr::caching_resource> resource{std::in_place, this->dev(), mr::caching_options{}, &upstream};
  stream s{this->dev()};
  const std::size_t n = 50'000 + rng()() % 20'000;
  pinned input{this->dev(), n}, out_a{this->dev(), n}, out_b{this->dev(), n};
  const auto da = static_cast<std::uint8_t>(rng()() | 1u);
  const auto db = static_cast<std::uint8_t>(da + 2);
  std::optional<graph_pool> pool{std::in_place};
  EXPECT_TRUE(resource->checkpoint(*pool).segments.empty()) << "no memory of the pool here yet";

  begin_capture(s, *pool);  // the root: its output stays live after the capture
  void* root = resource->allocate(n, s);
  (void)copy_async(root, input.data(), n, s);
  std::optional<graph> g_root{end_capture(s)};
  const mr::graph_pool_checkpoint at_root = resource->checkpoint(*pool);
  ASSERT_EQ(at_root.live.size(), 1u);
  EXPECT_EQ(at_root.live[0].ptr, root);
  EXPECT_EQ(at_root.live[0].allocation.requested_bytes, n);
  EXPECT_EQ(at_root.live[0].allocation.stream, stream_view{s});

  begin_capture(s, *pool);  // path A, reading the root's output
  void* a = resource->allocate(n, s);
  (void)copy_async(a, root, n, s);
  device_add_bytes(s, a, n, da);
  (void)copy_async(out_a.data(), a, n, s);
  std::optional<graph> g_a{end_capture(s)};
  EXPECT_NE(a, root);
  const std::size_t reserved = pool->reserved_bytes();

  // A forged checkpoint changes nothing.
  mr::graph_pool_checkpoint forged = at_root;
  forged.live.push_back({static_cast<std::uint8_t*>(root) + 512, forged.live[0].allocation});
  EXPECT_THROW((void)resource->restore(forged), logic_error);
  EXPECT_EQ(resource->checkpoint(*pool).live.size(), 2u);

  const mr::graph_pool_restored restored = resource->restore(at_root);
  std::vector<void*> freed;
  for (const auto& b : restored.freed) freed.push_back(b.ptr);
  EXPECT_THAT(freed, ::testing::UnorderedElementsAre(root, a));
  ASSERT_EQ(restored.allocated.size(), 1u);
  EXPECT_EQ(restored.allocated[0].ptr, root);
  EXPECT_EQ(restored.allocated[0].allocation.requested_bytes, n);
  EXPECT_EQ(resource->allocation_info(a), std::nullopt) << "path A's output was freed by the restore";
  const auto root_info = resource->allocation_info(root);
  ASSERT_TRUE(root_info.has_value());
  EXPECT_EQ(root_info->requested_bytes, n);
  EXPECT_EQ(root_info->pool, mr::segment_pool::graph);
  EXPECT_EQ(pool->allocated_bytes(), root_info->block_bytes);

  begin_capture(s, *pool);  // path B, in the memory path A's output held
  void* b = resource->allocate(n, s);
  (void)copy_async(b, root, n, s);
  device_add_bytes(s, b, n, db);
  (void)copy_async(out_b.data(), b, n, s);
  std::optional<graph> g_b{end_capture(s)};
  EXPECT_EQ(b, a) << "a block the restore freed is reused by the next capture";
  EXPECT_EQ(pool->reserved_bytes(), reserved);

  for (int round = 0; round < 6; ++round) {
    const bytes_t x = random_bytes(n);
    input.write(x);
    g_root->launch(s);
    (round % 2 == 0 ? g_a : g_b)->launch(s);
    s.synchronize();
    const bytes_t out = (round % 2 == 0 ? out_a : out_b).read();
    const std::uint8_t d = round % 2 == 0 ? da : db;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], static_cast<std::uint8_t>(x[i] + d)) << "round " << round << ", byte " << i;
    }
  }
  g_root.reset();
  g_a.reset();
  g_b.reset();
  pool.reset();
  resource->deallocate(root, n, s);
  resource->deallocate(b, n, s);
  resource->empty_cache();
  EXPECT_EQ(upstream.live.load(), 0) << "the pool's segments go back with its last block";
  resource.reset();
}

// A captured step with many blocks of mixed sizes, all live at once: small
// ones share segments of 2 MiB, large ones are cut from one growing range, so
// the pool holds little more than the blocks; no two blocks overlap, and
// every block carries its own bytes through each replay.
TYPED_TEST(GraphPools, BlocksOfMixedSizesShareSegmentsWithoutOverlapping) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()};
  std::vector<std::size_t> sizes;
  std::size_t small_bytes = 0, large_bytes = 0, total = 0;
  for (int i = 0; i < 40; ++i) {
    const bool large = i % 3 == 0;
    const std::size_t n = large ? 3 * MiB / 2 + rng()() % (4 * MiB) : 1 + rng()() % (256 * 1024);
    const std::size_t block = (n + 511) / 512 * 512;
    (large ? large_bytes : small_bytes) += block;
    sizes.push_back(n);
    total += n;
  }
  pinned input{this->dev(), total}, output{this->dev(), total};
  const auto delta = static_cast<std::uint8_t>(rng()() | 1u);
  graph_pool pool;
  begin_capture(s, pool);
  std::vector<void*> blocks;
  std::size_t offset = 0;
  for (const std::size_t n : sizes) {
    void* p = resource.allocate(n, s);
    (void)copy_async(p, static_cast<std::uint8_t*>(input.data()) + offset, n, s);
    device_add_bytes(s, p, n, delta);
    blocks.push_back(p);
    offset += n;
  }
  offset = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    (void)copy_async(static_cast<std::uint8_t*>(output.data()) + offset, blocks[i], sizes[i], s);
    offset += sizes[i];
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      ASSERT_FALSE(overlaps(blocks[i], sizes[i], blocks[j], sizes[j])) << "blocks " << j << " and " << i;
    }
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) resource.deallocate(blocks[i], sizes[i], s);
  graph g = end_capture(s);
  // Small blocks of at most 256 KiB fill a 2 MiB segment to at least 1.75 MiB.
  const std::size_t small_segments = (small_bytes + 7 * MiB / 4 - 1) / (7 * MiB / 4);
  EXPECT_LE(pool.reserved_bytes(), (large_bytes + 2 * MiB - 1) / (2 * MiB) * (2 * MiB) + small_segments * 2 * MiB);
  for (int round = 0; round < 2; ++round) {
    const bytes_t x = random_bytes(total);
    input.write(x);
    g.launch(s);
    s.synchronize();
    const bytes_t out = output.read();
    for (std::size_t i = 0; i < total; ++i) {
      ASSERT_EQ(out[i], static_cast<std::uint8_t>(x[i] + delta)) << "round " << round << ", byte " << i;
    }
  }
}

// Freed neighbours merge: two large blocks freed in the capture serve a
// request for both on the same stream, and a later capture that needs more
// grows the range from that free end instead of mapping a block anew.
TYPED_TEST(GraphPools, FreedNeighboursMergeAndALargerGraphGrowsTheFreeEnd) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()};
  const std::size_t n = 3 * MiB;
  const std::size_t m = 10 * MiB + rng()() % MiB;
  pinned input{this->dev(), m}, out_first{this->dev(), 2 * n}, out_second{this->dev(), m};
  graph_pool pool;
  begin_capture(s, pool);
  void* a = resource.allocate(n, s);
  void* b = resource.allocate(n, s);
  EXPECT_EQ(b, static_cast<std::uint8_t*>(a) + n) << "large blocks are cut side by side from the range";
  (void)copy_async(a, input.data(), n, s);
  (void)copy_async(b, static_cast<std::uint8_t*>(input.data()) + n, n, s);
  resource.deallocate(b, n, s);
  resource.deallocate(a, n, s);
  const std::size_t reserved = pool.reserved_bytes();
  void* c = resource.allocate(2 * n, s);  // reads what a and b held: the same bytes, merged
  EXPECT_EQ(c, a) << "two freed neighbours serve a request for both";
  EXPECT_EQ(pool.reserved_bytes(), reserved);
  device_add_bytes(s, c, 2 * n, 1);
  (void)copy_async(out_first.data(), c, 2 * n, s);
  resource.deallocate(c, 2 * n, s);
  graph first = end_capture(s);

  begin_capture(s, pool);
  void* d = resource.allocate(m, s);
  EXPECT_EQ(d, a) << "the free end of the range grows to the larger request";
  EXPECT_LT(pool.reserved_bytes(), reserved + m) << "the range grew by a whole block instead of what was missing";
  (void)copy_async(d, input.data(), m, s);
  device_add_bytes(s, d, m, 2);
  (void)copy_async(out_second.data(), d, m, s);
  resource.deallocate(d, m, s);
  graph second = end_capture(s);
  for (int round = 0; round < 2; ++round) {
    const bytes_t x = random_bytes(m);
    input.write(x);
    first.launch(s);
    second.launch(s);
    s.synchronize();
    const bytes_t f = out_first.read(), g = out_second.read();
    for (std::size_t i = 0; i < 2 * n; ++i) {
      ASSERT_EQ(f[i], static_cast<std::uint8_t>(x[i] + 1)) << "round " << round << ", byte " << i;
    }
    for (std::size_t i = 0; i < m; ++i) {
      ASSERT_EQ(g[i], static_cast<std::uint8_t>(x[i] + 2)) << "round " << round << ", byte " << i;
    }
  }
}

// A block free for every capture and its neighbour freed in the open capture
// on the stream that allocates merge, as PyTorch's graph pools merge free
// neighbours: a request for both is cut from them, even where a free block
// as large lies higher up (best fit takes the lowest among equals), and the
// pool does not grow. The graphs replay right, the later one in the
// earlier's memory.
TYPED_TEST(GraphPools, ABlockFreedBeforeTheCaptureAndOneFreedInItMerge) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()};
  const std::size_t n = 3 * MiB + 512 * (rng()() % 256);
  pinned input{this->dev(), 2 * n}, out_a{this->dev(), 2 * n}, out_y{this->dev(), n}, out_c{this->dev(), 2 * n};
  graph_pool pool;
  begin_capture(s, pool);
  void* a = resource.allocate(2 * n, s);
  void* guard = resource.allocate(n, s);  // keeps a and f apart
  void* f = resource.allocate(2 * n, s);  // as large as a, higher up
  void* top = resource.allocate(n, s);    // keeps the free end of the range away from f
  ASSERT_GT(f, a);
  (void)copy_async(a, input.data(), 2 * n, s);
  (void)copy_async(out_a.data(), a, 2 * n, s);
  resource.deallocate(a, 2 * n, s);
  resource.deallocate(f, 2 * n, s);
  graph first = end_capture(s);

  begin_capture(s, pool);
  // a's first half (the lower of two equals); the second stays free for every capture.
  void* y = resource.allocate(n, s);
  ASSERT_EQ(y, a);
  (void)copy_async(y, static_cast<std::uint8_t*>(input.data()) + n, n, s);
  (void)copy_async(out_y.data(), y, n, s);
  resource.deallocate(y, n, s);  // free for this capture only, on `s`: one block with the second half
  const std::size_t reserved = pool.reserved_bytes();
  void* c = resource.allocate(2 * n, s);
  EXPECT_EQ(c, a) << "the half freed in this capture and the half free before it are not one block again";
  EXPECT_EQ(pool.reserved_bytes(), reserved) << "the pool grew instead";
  (void)copy_async(c, input.data(), 2 * n, s);
  device_add_bytes(s, c, 2 * n, 3);
  (void)copy_async(out_c.data(), c, 2 * n, s);
  resource.deallocate(c, 2 * n, s);
  resource.deallocate(guard, n, s);
  resource.deallocate(top, n, s);
  graph second = end_capture(s);
  for (int round = 0; round < 2; ++round) {
    const bytes_t x = random_bytes(2 * n);
    input.write(x);
    first.launch(s);
    second.launch(s);
    s.synchronize();
    const bytes_t ra = out_a.read(), ry = out_y.read(), rc = out_c.read();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(ry[i], x[n + i]) << "round " << round << ", byte " << i;
    for (std::size_t i = 0; i < 2 * n; ++i) {
      ASSERT_EQ(ra[i], x[i]) << "round " << round << ", byte " << i;
      ASSERT_EQ(rc[i], static_cast<std::uint8_t>(x[i] + 3)) << "round " << round << ", byte " << i;
    }
  }
}

// A block the open capture may not reuse (it allocated it, and another stream
// freed it) does not merge with its free neighbour: merged, the capture could
// not reuse the neighbour either, and the pool would grow for a request the
// neighbour serves.
TYPED_TEST(GraphPools, ABlockTheCaptureMayNotReuseLeavesItsNeighbourToIt) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()}, other{this->dev()};
  const std::size_t n = 3 * MiB + 512 * (rng()() % 256);
  graph_pool pool;
  begin_capture(s, pool);
  void* a = resource.allocate(2 * n, s);
  void* top = resource.allocate(n, s);  // keeps the free end of the range away from a
  resource.deallocate(a, 2 * n, s);
  graph first = end_capture(s);

  begin_capture(s, pool);
  void* x = resource.allocate(n, s);  // a's first half; the second stays free for every capture
  ASSERT_EQ(x, a);
  resource.deallocate(x, n, other);  // not reusable by this capture
  const std::size_t reserved = pool.reserved_bytes();
  void* y = resource.allocate(n, s);
  EXPECT_EQ(y, static_cast<std::uint8_t*>(a) + n) << "the second half went with the first";
  EXPECT_EQ(pool.reserved_bytes(), reserved) << "the pool grew instead";
  resource.deallocate(y, n, s);
  resource.deallocate(top, n, s);
  graph second = end_capture(s);
}

// A graph pool's memory is the resource's too, as PyTorch counts its private
// pools': in its statistics (handed out, reserved, segments) and against its
// limit, for the pool's growth and for ordinary allocations alike; all of it
// goes once the graph and its pool do.
TYPED_TEST(GraphPools, AGraphPoolsMemoryCountsInTheResourcesStatisticsAndLimit) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()};
  const std::size_t large = 5 * MiB + rng()() % MiB;
  const std::size_t small = 1 + rng()() % 4096;
  resource.deallocate(resource.allocate(MiB, s), MiB, s);  // the cache holds some memory of its own
  const mr::caching_statistics before = resource.statistics();
  std::optional<graph_pool> pool{std::in_place};
  begin_capture(s, *pool);
  void* p = resource.allocate(large, s);
  void* q = resource.allocate(small, s);
  const std::size_t blocks = resource.allocation_info(p)->block_bytes + resource.allocation_info(q)->block_bytes;
  mr::caching_statistics now = resource.statistics();
  EXPECT_EQ(now.allocated_bytes, before.allocated_bytes + blocks);
  EXPECT_EQ(now.requested_bytes, before.requested_bytes + large + small);
  EXPECT_EQ(now.live_allocations, before.live_allocations + 2);
  EXPECT_EQ(now.reserved_bytes, before.reserved_bytes + pool->reserved_bytes());
  EXPECT_GE(now.peak_reserved_bytes, now.reserved_bytes);
  EXPECT_EQ(now.segments, before.segments + resource.checkpoint(*pool).segments.size());
  EXPECT_EQ(now.segments, before.segments + 2) << "a small segment and the stream's range";
  resource.deallocate(p, large, s);
  resource.deallocate(q, small, s);
  std::optional<graph> g{end_capture(s)};
  now = resource.statistics();
  EXPECT_EQ(now.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(now.reserved_bytes, before.reserved_bytes + pool->reserved_bytes()) << "the pool keeps its memory";
  EXPECT_GE(now.peak_allocated_bytes, before.allocated_bytes + blocks);

  // At the limit, neither the pool nor the cache grows past it.
  resource.set_limit(now.reserved_bytes + MiB);
  begin_capture(s, *pool);
  void* within = resource.allocate(large, s);  // the pool's free memory: no growth
  EXPECT_THROW((void)resource.allocate(4 * MiB, s), out_of_memory) << "the pool grew past the limit";
  resource.deallocate(within, large, s);
  std::optional<graph> g2{end_capture(s)};
  EXPECT_THROW((void)resource.allocate(2 * MiB + before.reserved_bytes, s), out_of_memory)
      << "the cache grew past the limit that the pool's memory fills";
  resource.set_limit(std::nullopt);

  const mr::caching_statistics with_pool = resource.statistics();  // the cache gave its own memory back
  const std::size_t pool_reserved = pool->reserved_bytes();
  g.reset();
  g2.reset();
  pool.reset();
  now = resource.statistics();
  EXPECT_EQ(now.reserved_bytes, with_pool.reserved_bytes - pool_reserved)
      << "the pool's memory went back, and its count with it";
  EXPECT_EQ(now.segments, with_pool.segments - 2);
  EXPECT_EQ(now.allocated_bytes, before.allocated_bytes);
}

// Large blocks of each stream come from a range of that stream, as PyTorch
// keeps an expandable segment per stream: two streams capturing into one
// pool hold two segments, and each stream's blocks stay side by side.
TYPED_TEST(GraphPools, EachStreamCutsLargeBlocksFromARangeOfItsOwn) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()}, t{this->dev()};
  const std::size_t n = 2 * MiB + rng()() % MiB;
  graph_pool pool;
  std::vector<void*> blocks;
  std::vector<graph> graphs;
  for (stream* on : {&s, &t, &s}) {
    begin_capture(*on, pool);
    blocks.push_back(resource.allocate(n, *on));
    device_add_bytes(*on, blocks.back(), n, 1);
    graphs.push_back(end_capture(*on));
  }
  const mr::graph_pool_checkpoint c = resource.checkpoint(pool);
  ASSERT_EQ(c.segments.size(), 2u) << "one growable segment per stream";
  const auto segment_of = [&](const void* p) {
    for (std::size_t i = 0; i < c.segments.size(); ++i) {
      const auto& [base, bytes] = c.segments[i];
      if (overlaps(p, 1, base, bytes)) return i;
    }
    return c.segments.size();
  };
  EXPECT_EQ(segment_of(blocks[0]), segment_of(blocks[2]));
  EXPECT_NE(segment_of(blocks[0]), segment_of(blocks[1]));
  EXPECT_LT(segment_of(blocks[1]), c.segments.size());
  // The checkpoint says which segments grow, and whose they are (PyTorch's
  // snapshot shows them as expandable segments of that stream).
  ASSERT_EQ(c.growable.size(), 2u);
  for (const auto& [base, on] : c.growable) {
    const void* mine = on.handle() == s.view().handle() ? blocks[0] : blocks[1];
    EXPECT_TRUE(on.handle() == s.view().handle() || on.handle() == t.view().handle());
    EXPECT_EQ(c.segments[segment_of(mine)].first, base) << "a growable segment named with another stream";
  }
  s.synchronize();
  t.synchronize();
  resource.deallocate(blocks[0], n, s);
  resource.deallocate(blocks[1], n, t);
  resource.deallocate(blocks[2], n, s);
}

// Random captures on two streams into one pool, with blocks of every size
// class allocated and freed inside and outside them, checkpoints taken and
// restored: after every step the pool's live blocks are exactly those the test
// holds, each inside one segment and none overlapping another, and the pool's
// counts add up (reserved: its segments; allocated: its live blocks); the
// other stream, outside the captures, never gets the pool's memory, and the
// segments go back with the pool.
TYPED_TEST(GraphPools, RandomSplitsAndMergesKeepThePoolsLayoutExact) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  counting_device_resource upstream{this->dev()};
  std::optional<mr::caching_resource> with_upstream;
  std::optional<mr::caching_resource> own;
  for (const bool growable : {true, false}) {
    mr::caching_resource* resource = nullptr;
    if (growable) {
      resource = &own.emplace(this->dev());  // large blocks from growable segments
    } else {
      resource = &with_upstream.emplace(this->dev(), mr::caching_options{}, &upstream);  // segments of their own
    }
    stream s{this->dev()}, t{this->dev()};
    auto& r = rng();
    struct held {
      std::size_t n;
      stream* on;
    };
    std::map<void*, held> live;  // the pool's blocks the test holds
    std::optional<graph_pool> pool{std::in_place};
    std::vector<graph> graphs;
    std::optional<std::pair<mr::graph_pool_checkpoint, std::map<void*, held>>> saved;
    const auto size_of = [&] {
      switch (r() % 4) {
        case 0:
          return std::size_t{1} + r() % 4096;
        case 1:
          return std::size_t{4096} + r() % MiB;
        case 2:
          return MiB + 1 + r() % (3 * MiB);
        default:
          return 4 * MiB + r() % (8 * MiB);
      }
    };
    const auto check = [&](int step) {
      const mr::graph_pool_checkpoint c = resource->checkpoint(*pool);
      std::size_t reserved = 0, allocated = 0;
      for (const auto& [base, bytes] : c.segments) reserved += bytes;
      ASSERT_EQ(pool->reserved_bytes(), reserved) << "step " << step;
      ASSERT_EQ(c.live.size(), live.size()) << "step " << step;
      const std::uint8_t* end_of_last = nullptr;
      for (const auto& b : c.live) {
        const auto it = live.find(b.ptr);
        ASSERT_NE(it, live.end()) << "step " << step << ": a live block the test does not hold";
        ASSERT_EQ(b.allocation.requested_bytes, it->second.n) << "step " << step;
        ASSERT_GE(b.allocation.block_bytes, it->second.n) << "step " << step;
        const auto* start = static_cast<const std::uint8_t*>(b.ptr);
        ASSERT_GE(start, end_of_last) << "step " << step << ": live blocks overlap";
        end_of_last = start + b.allocation.block_bytes;
        const bool inside = std::any_of(c.segments.begin(), c.segments.end(), [&](const auto& seg) {
          const auto* base = static_cast<const std::uint8_t*>(seg.first);
          return start >= base && end_of_last <= base + seg.second;
        });
        ASSERT_TRUE(inside) << "step " << step << ": a block outside every segment";
        allocated += b.allocation.block_bytes;
      }
      ASSERT_EQ(pool->allocated_bytes(), allocated) << "step " << step;
    };
    for (int capture = 0; capture < 24; ++capture) {
      stream& on = r() % 2 == 0 ? s : t;
      stream& other = &on == &s ? t : s;
      begin_capture(on, *pool);
      for (int op = 0; op < 12; ++op) {
        const int step = capture * 100 + op;
        if (r() % 3 != 0 || live.empty()) {
          const std::size_t n = size_of();
          live.emplace(resource->allocate(n, on), held{n, &on});
        } else {
          auto it = live.begin();
          std::advance(it, static_cast<std::ptrdiff_t>(r() % live.size()));
          resource->deallocate(it->first, it->second.n, on);
          live.erase(it);
        }
        check(step);
        if (::testing::Test::HasFatalFailure()) return;
      }
      graphs.push_back(end_capture(on));
      // The other stream, outside any capture, never gets the pool's memory.
      const std::size_t n = size_of();
      void* ordinary = resource->allocate(n, other);
      for (const auto& [p, h] : live) ASSERT_FALSE(overlaps(ordinary, n, p, h.n)) << "capture " << capture;
      resource->deallocate(ordinary, n, other);
      if (r() % 4 == 0 && !live.empty()) {  // a block freed outside the capture that made it
        auto it = live.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(r() % live.size()));
        other.synchronize();
        it->second.on->synchronize();
        resource->deallocate(it->first, it->second.n, *it->second.on);
        live.erase(it);
      }
      if (r() % 3 == 0) {
        saved.emplace(resource->checkpoint(*pool), live);
      } else if (saved && r() % 2 == 0) {
        s.synchronize();
        t.synchronize();
        (void)resource->restore(saved->first);
        live = saved->second;
      }
      check(capture * 100 + 99);
      if (::testing::Test::HasFatalFailure()) return;
    }
    s.synchronize();
    t.synchronize();
    for (const auto& [p, h] : live) resource->deallocate(p, h.n, *h.on);
    graphs.clear();
    pool.reset();
    resource->empty_cache();
  }
  own.reset();
  with_upstream.reset();
  EXPECT_EQ(upstream.live.load(), 0) << "the pool's segments go back with it";
}

// A restore puts the checkpoint's blocks back where they were even when the
// pool has merged them into a larger block since: that block is freed, the
// checkpoint's blocks are cut out of it, and the rest stays free.
TYPED_TEST(GraphPools, ARestoreCutsTheCheckpointsBlocksOutOfMergedMemory) {
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()};
  const std::size_t n1 = 20'000 + rng()() % 10'000, n2 = 30'000 + rng()() % 10'000;
  pinned input{this->dev(), n1 + n2}, output{this->dev(), n1 + n2};
  graph_pool pool;
  begin_capture(s, pool);  // the root: two outputs, side by side
  void* x = resource.allocate(n1, s);
  void* y = resource.allocate(n2, s);
  (void)copy_async(x, input.data(), n1, s);
  (void)copy_async(y, static_cast<std::uint8_t*>(input.data()) + n1, n2, s);
  graph root = end_capture(s);
  const mr::graph_pool_checkpoint at_root = resource.checkpoint(pool);
  ASSERT_EQ(at_root.live.size(), 2u);
  const auto x_block = resource.allocation_info(x)->block_bytes;
  const auto y_block = resource.allocation_info(y)->block_bytes;

  resource.deallocate(x, n1, s);  // path A drops both outputs and takes their memory whole
  resource.deallocate(y, n2, s);
  begin_capture(s, pool);
  void* z = resource.allocate(x_block + y_block, s);
  EXPECT_EQ(z, x) << "the freed outputs merged";
  resource.deallocate(z, x_block + y_block, s);
  graph path_a = end_capture(s);

  const mr::graph_pool_restored restored = resource.restore(at_root);
  ASSERT_EQ(restored.allocated.size(), 2u);
  for (const auto& [p, block, n] : {std::tuple{x, x_block, n1}, std::tuple{y, y_block, n2}}) {
    const auto info = resource.allocation_info(p);
    ASSERT_TRUE(info.has_value()) << "a block of the checkpoint is live again";
    EXPECT_EQ(info->block_bytes, block);
    EXPECT_EQ(info->requested_bytes, n);
  }
  begin_capture(s, pool);  // path B reads the root's outputs from a block of its own
  void* w = resource.allocate(n1 + n2, s);
  EXPECT_FALSE(overlaps(w, n1 + n2, x, x_block) || overlaps(w, n1 + n2, y, y_block));
  (void)copy_async(w, x, n1, s);
  (void)copy_async(static_cast<std::uint8_t*>(w) + n1, y, n2, s);
  device_add_bytes(s, w, n1 + n2, 7);
  (void)copy_async(output.data(), w, n1 + n2, s);
  resource.deallocate(w, n1 + n2, s);
  graph path_b = end_capture(s);
  for (int round = 0; round < 2; ++round) {
    const bytes_t in = random_bytes(n1 + n2);
    input.write(in);
    root.launch(s);
    path_b.launch(s);
    s.synchronize();
    const bytes_t out = output.read();
    for (std::size_t i = 0; i < n1 + n2; ++i) {
      ASSERT_EQ(out[i], static_cast<std::uint8_t>(in[i] + 7)) << "round " << round << ", byte " << i;
    }
  }
  resource.deallocate(x, n1, s);
  resource.deallocate(y, n2, s);
}

// Ending an external capture twice, or one never begun, is harmless; while
// none is open, no filter is asked.
TYPED_TEST(GraphPools, EndingAnExternalCaptureIsIdempotent) {
  graph_pool pool;
  int asked = 0;
  const std::uint64_t token = detail::external_capture_began(this->dev(), detail::graph_pool_access::state(pool),
                                                             [&](stream_handle) { return ++asked, false; });
  detail::external_capture_ended(token);
  detail::external_capture_ended(token);
  detail::external_capture_ended(token + 1'000'000);
  mr::caching_resource resource{this->dev()};
  stream s{this->dev()};
  resource.deallocate(resource.allocate(4096, s), 4096, s);
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(pool.reserved_bytes(), 0u);
}

// PyTorch's graph reset and recapture: a graph and its pool's handle go while
// a block of the pool lives; the next capture (another pool) reads that block
// and frees it. The old pool's memory may not go back then (freeing device
// memory would invalidate the capture), and the new graph reads the block at
// every launch, so it stays until that graph goes.
TYPED_TEST(GraphPools, ABlockOfAnOldPoolFreedInACaptureStaysUntilThatGraphGoes) {
  counting_device_resource upstream{this->dev()};
  std::optional<mr::caching_resource> resource{std::in_place, this->dev(), mr::caching_options{}, &upstream};
  stream s{this->dev()};
  const std::size_t n = 40'000 + rng()() % 4096;
  pinned input{this->dev(), n}, output{this->dev(), n};
  const bytes_t contents = random_bytes(n);
  input.write(contents);
  void* kept = nullptr;
  {
    graph_pool first_pool;
    begin_capture(s, first_pool);
    kept = resource->allocate(n, s);
    (void)copy_async(kept, input.data(), n, s);
    graph first = end_capture(s);
    first.launch(s);
    s.synchronize();
  }
  ASSERT_EQ(upstream.live.load(), 1) << "the old pool's block lives on after its graph and handle";
  begin_capture(s);
  void* fresh = resource->allocate(n, s);
  (void)copy_async(fresh, kept, n, s);
  resource->deallocate(kept, n, s);  // the old pool's last block
  EXPECT_EQ(upstream.live.load(), 2) << "the old pool's memory went back during a capture";
  (void)copy_async(output.data(), fresh, n, s);
  resource->deallocate(fresh, n, s);
  std::optional<graph> second{end_capture(s)};
  EXPECT_EQ(upstream.live.load(), 2) << "the graph reads the old block: its pool stays while the graph lives";
  for (int round = 0; round < 2; ++round) {
    output.write(random_bytes(n));
    second->launch(s);
    s.synchronize();
    ASSERT_EQ(output.read(), contents) << "launch " << round;
  }
  second.reset();
  EXPECT_EQ(upstream.live.load(), 0) << "both pools go with the last graph";
  resource.reset();
}

// A graph destroyed while another stream is being captured: its pool's
// memory goes back once that capture has ended, not during it.
TYPED_TEST(GraphPools, AGraphDestroyedDuringAnotherCaptureGivesItsMemoryBackAfterIt) {
  counting_device_resource upstream{this->dev()};
  std::optional<mr::caching_resource> resource{std::in_place, this->dev(), mr::caching_options{}, &upstream};
  stream s{this->dev()}, other{this->dev()};
  const std::size_t n = 30'000 + rng()() % 4096;
  pinned input{this->dev(), n}, output{this->dev(), n};
  const bytes_t contents = random_bytes(n);
  input.write(contents);
  begin_capture(s);
  void* a = resource->allocate(n, s);
  (void)copy_async(a, input.data(), n, s);
  resource->deallocate(a, n, s);
  std::optional<graph> first{end_capture(s)};
  ASSERT_EQ(upstream.live.load(), 1);
  begin_capture(other);
  void* b = resource->allocate(n, other);
  (void)copy_async(b, input.data(), n, other);
  (void)copy_async(output.data(), b, n, other);
  first.reset();  // during the capture of `other`
  EXPECT_EQ(upstream.live.load(), 2) << "a pool's memory went back during a capture";
  resource->deallocate(b, n, other);
  std::optional<graph> second{end_capture(other)};
  EXPECT_EQ(upstream.live.load(), 1) << "the destroyed graph's memory is back once the capture has ended";
  output.write(random_bytes(n));
  second->launch(other);
  other.synchronize();
  EXPECT_EQ(output.read(), contents);
  second.reset();
  EXPECT_EQ(upstream.live.load(), 0);
  resource.reset();
}

}  // namespace
}  // namespace syncmem::test
