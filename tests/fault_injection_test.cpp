// ctest-labels: threaded
// Fault injection: representative work (synced_memory sequences, tensor
// reshapes, staged transfers, allocator churn) is run once per allocation it
// makes, with memory running out at that allocation (mr::failure_adaptor: it
// and every later one fail, until the caller has seen the failure; a cache
// that frees and retries is then refused as well). Whenever the
// failure reaches the caller (out_of_memory, a std::bad_alloc), the object is
// as it was before the call: same size, state and contents (the strong
// guarantee). At the end of every run the tracking adaptors in front of the
// upstream resources report nothing live: nothing leaked on any path.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <ostream>
#include <random>
#include <vector>

#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/cuda_resource.hpp"
#include "syncmem/mr/emulated_resource.hpp"
#include "syncmem/mr/failure_adaptor.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "syncmem/mr/tracking_adaptor.hpp"
#include "syncmem/stream.hpp"
#include "syncmem/synced_memory.hpp"
#include "syncmem/tensor.hpp"
#include "test_support.hpp"

namespace syncmem {

void PrintTo(sync_state state, std::ostream* os) { *os << to_string(state); }

namespace {

using bytes_t = std::vector<std::uint8_t>;

// Where memory runs out: the n-th allocation over every adaptor of a run and
// all after it fail, until fail_at is set back to 0 (none). The count is
// shared, so that the runs number allocation points across the host and
// device resources alike.
struct injection {
  std::uint64_t fail_at = 0;
  std::atomic<std::uint64_t> calls{0};
  std::atomic<bool> injected{false};

  [[nodiscard]] mr::failure_adaptor::predicate predicate() {
    return [this](std::uint64_t, std::size_t, stream_view) {
      const std::uint64_t n = ++calls;
      if (fail_at == 0 || n < fail_at) return false;
      injected = true;
      return true;
    };
  }
};

// upstream <- failure <- tracking: the object under test allocates through the
// tracking adaptor, which sees every allocation that succeeded and its free.
struct injected_resource {
  injected_resource(mr::memory_resource& upstream, injection& inj)
      : failing{upstream, inj.predicate()}, tracking{failing} {}
  mr::failure_adaptor failing;
  mr::tracking_adaptor tracking;
};

std::unique_ptr<mr::memory_resource> device_upstream(device_id d) {
  if (d.kind() == device_kind::cuda) return std::make_unique<mr::cuda_resource>(d);
  return std::make_unique<mr::emulated_resource>(d);
}

// Runs `scenario` once without failures to count its allocations, then once
// per allocation with memory running out there. The scenario returns how many
// injected failures reached it as out_of_memory. Checks that failures did
// reach the caller (or, with `must_reach` false, never did: the work absorbs
// them).
template <class Scenario>
void for_each_allocation_point(Scenario&& scenario, bool must_reach = true) {
  std::uint64_t points = 0;
  {
    injection none;
    scenario(none);
    points = none.calls.load();
  }
  ASSERT_GT(points, 0U) << "the scenario allocates nothing: it tests nothing";
  std::uint64_t reached = 0;
  for (std::uint64_t k = 1; k <= points; ++k) {
    SCOPED_TRACE(::testing::Message() << "allocation " << k << " of " << points << " fails");
    injection inj;
    inj.fail_at = k;
    reached += scenario(inj);
    EXPECT_TRUE(inj.injected.load()) << "the run did not reach allocation " << k << ": the scenario is not repeatable";
    if (::testing::Test::HasFatalFailure()) return;
  }
  if (must_reach) {
    EXPECT_GT(reached, 0U) << "no injected failure reached the caller";
  } else {
    EXPECT_EQ(reached, 0U) << "injected failures reached the caller";
  }
}

template <class Kind>
class FaultInjection : public test::device_test<Kind> {};

TYPED_TEST_SUITE(FaultInjection, test::device_kinds, test::device_kind_names);

// ---- synced_memory: random sequences ---------------------------------------------

bytes_t host_bytes(synced_memory& m) {
  const auto* p = static_cast<const std::uint8_t*>(m.host_data());
  return {p, p + m.size()};
}

TYPED_TEST(FaultInjection, SyncedMemorySequencesKeepTheStrongGuarantee) {
  const device_id d = this->dev();
  auto device = device_upstream(d);
  mr::pinned_resource pinned{d.kind()};
  for (int sequence = 0; sequence < 10; ++sequence) {
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "sequence " << sequence << ", seed " << seed);
    for_each_allocation_point([&](injection& inj) -> int {
      injected_resource host{pinned, inj};
      injected_resource dev{*device, inj};
      std::mt19937_64 random{seed};
      int reached = 0;
      {
        stream s{d};
        synced_memory_options options;
        options.host_resource = &host.tracking;
        options.device_resource = &dev.tracking;
        options.label = "fault-injected";
        std::size_t size = 1000 + random() % 5000;
        synced_memory m{size, d, options};
        bytes_t expect;            // the contents, where known (a prefix of `size` bytes)
        constexpr int steps = 24;  // the last one reads the contents back
        for (int step = 0; step < steps && reached == 0; ++step) {
          const int op = step == steps - 1 ? 1 : static_cast<int>(random() % 8);
          // A prefetch in flight may complete during any call: the state then
          // reads synced, as it would have without the call.
          const bool prefetch_in_flight = !m.ready();
          const auto state_before = m.state();
          const auto size_before = m.size();
          const auto capacity_before = m.capacity();
          const bytes_t fresh = [&] {
            bytes_t b(m.size());
            for (auto& x : b) x = static_cast<std::uint8_t>(random());
            return b;
          }();
          const auto delta = static_cast<std::uint8_t>(1 + random() % 200);
          const std::size_t grow_to = size + 1 + random() % 6000;
          try {
            switch (op) {
              case 0:  // host write
                std::memcpy(m.mutable_host_data(), fresh.data(), fresh.size());
                expect = fresh;
                break;
              case 1:  // host read
                EXPECT_TRUE(std::equal(expect.begin(), expect.end(), host_bytes(m).begin()));
                break;
              case 2:                                  // device write, in order on s
                if (expect.size() != m.size()) break;  // only over known contents
                test::device_add_bytes(s, m.mutable_device_data(s), m.size(), delta);
                for (auto& x : expect) x = static_cast<std::uint8_t>(x + delta);
                break;
              case 3:  // device read
                (void)m.device_data(s);
                break;
              case 4:  // grow, keeping the contents
                m.resize(grow_to);
                size = grow_to;
                break;
              case 5: {  // a deep copy, checked
                synced_memory c = m.clone();
                const bytes_t got = host_bytes(c);
                EXPECT_TRUE(std::equal(expect.begin(), expect.end(), got.begin()));
                break;
              }
              case 6:
                m.prefetch_to_device(s);
                break;
              default:
                m.prefetch_to_host();
                break;
            }
          } catch (const std::bad_alloc& e) {
            EXPECT_TRUE(inj.injected.load()) << "out of memory without an injected failure: " << e.what();
            ++reached;
            // As it was before the call ...
            if (prefetch_in_flight && m.state() == sync_state::synced) {
              SUCCEED();
            } else {
              EXPECT_EQ(m.state(), state_before) << "op " << op;
            }
            EXPECT_EQ(m.size(), size_before) << "op " << op;
            EXPECT_EQ(m.capacity(), capacity_before) << "op " << op;
            inj.fail_at = 0;  // ... and it works on, with its contents.
            const bytes_t got = host_bytes(m);
            EXPECT_TRUE(std::equal(expect.begin(), expect.end(), got.begin())) << "contents changed, op " << op;
          }
        }
        s.synchronize();
      }
      EXPECT_EQ(host.tracking.live_count(), 0U) << host.tracking.leak_report();
      EXPECT_EQ(dev.tracking.live_count(), 0U) << dev.tracking.leak_report();
      return reached;
    });
    if (::testing::Test::HasFailure()) return;
  }
}

// ---- tensor reshapes ---------------------------------------------------------------

bytes_t tensor_bytes(const tensor& t) {
  const auto* p = static_cast<const std::uint8_t*>(t.host_data());
  return {p, p + t.nbytes()};
}

TYPED_TEST(FaultInjection, TensorReshapesKeepTheStrongGuarantee) {
  const device_id d = this->dev();
  auto device = device_upstream(d);
  mr::pinned_resource pinned{d.kind()};
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for_each_allocation_point([&](injection& inj) -> int {
    injected_resource host{pinned, inj};
    injected_resource dev{*device, inj};
    std::mt19937_64 random{seed};
    int reached = 0;
    {
      synced_memory_options options;
      options.host_resource = &host.tracking;
      options.device_resource = &dev.tracking;
      tensor t{dtype::float32, shape{2, 3, 4}, d, options};
      std::vector<tensor> views;  // tensors sharing t's storage: growing them detaches
      for (int step = 0; step < 30 && reached == 0; ++step) {
        tensor& target = views.empty() || random() % 2 == 0 ? t : views[random() % views.size()];
        const shape before = target.shape();
        const auto capacity_before = target.capacity();
        const bool shared_before = views.empty() ? false : target.shares_storage_with(t);
        bytes_t contents;
        try {
          contents = tensor_bytes(target);
          const int op = static_cast<int>(random() % 4);
          if (op == 0) {
            views.push_back(t);
          } else if (op == 1) {
            auto* p = static_cast<std::uint8_t*>(target.mutable_host_data());
            for (std::size_t i = 0; i < target.nbytes(); ++i) p[i] = static_cast<std::uint8_t>(random());
          } else {
            const std::int64_t a = 1 + static_cast<std::int64_t>(random() % 6);
            const std::int64_t b = 1 + static_cast<std::int64_t>(random() % 40);
            target.reshape(shape{a, b, 4});
            // What was there is still there, up to the smaller size.
            const bytes_t now = tensor_bytes(target);
            const std::size_t kept = std::min(now.size(), contents.size());
            EXPECT_TRUE(std::equal(now.begin(), now.begin() + static_cast<std::ptrdiff_t>(kept), contents.begin()));
          }
        } catch (const std::bad_alloc&) {
          ++reached;
          EXPECT_EQ(target.shape(), before);
          EXPECT_EQ(target.capacity(), capacity_before);
          if (!views.empty()) {
            EXPECT_EQ(target.shares_storage_with(t), shared_before);
          }
          inj.fail_at = 0;
          if (!contents.empty()) {
            EXPECT_EQ(tensor_bytes(target), contents);
          }
        }
      }
    }
    EXPECT_EQ(host.tracking.live_count(), 0U) << host.tracking.leak_report();
    EXPECT_EQ(dev.tracking.live_count(), 0U) << dev.tracking.leak_report();
    return reached;
  });
}

// ---- staged transfers ----------------------------------------------------------------

// With fallback_to_pageable off, a staging cache that cannot pin refuses the
// copy, which writes nothing; with it on (the default), the copy goes on
// through pageable blocks and is complete and right.
TYPED_TEST(FaultInjection, StagedTransfersLeaveTheDestinationUntouched) {
  const device_id d = this->dev();
  for (const bool fallback : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "fallback_to_pageable " << fallback);
    mr::pinned_resource pinned{d.kind()};
    auto device = device_upstream(d);
    const std::size_t n = (std::size_t{3} << 20) + 4097;  // staged in several chunks
    const bytes_t source = test::random_bytes(n);
    for_each_allocation_point(
        [&](injection& inj) -> int {
          injected_resource staging_upstream{pinned, inj};
          int reached = 0;
          {
            mr::caching_pinned_options staging_options;
            staging_options.fallback_to_pageable = fallback;
            mr::caching_pinned_resource staging{staging_upstream.tracking, staging_options};
            copy_options o = get_copy_options();
            o.staging = &staging;
            o.min_chunk = std::size_t{256} << 10;
            o.max_chunk = std::size_t{1} << 20;
            stream s{d};
            void* dev_buffer = device->allocate(n, s);
            // Upload: on failure nothing of the device buffer is written.
            const bytes_t canary = test::random_bytes(n);
            copy(dev_buffer, canary.data(), n, s);
            try {
              copy(dev_buffer, source.data(), n, s, o);
            } catch (const std::bad_alloc&) {
              ++reached;
              bytes_t back(n);
              copy(back.data(), dev_buffer, n, s);
              EXPECT_EQ(back, canary) << "a failed upload wrote part of its destination";
            }
            // Download: on failure nothing of the host buffer is written.
            bytes_t host(n, 0x3c);
            try {
              copy(host.data(), dev_buffer, n, s, o);
              EXPECT_EQ(host, reached != 0 ? canary : source);
            } catch (const std::bad_alloc&) {
              ++reached;
              EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](std::uint8_t b) { return b == 0x3c; }))
                  << "a failed download wrote part of its destination";
            }
            s.synchronize();
            device->deallocate(dev_buffer, n, s);
          }  // the cache gives its blocks back
          EXPECT_EQ(staging_upstream.tracking.live_count(), 0U) << staging_upstream.tracking.leak_report();
          return reached;
        },
        !fallback);
  }
}

// ---- allocator churn -------------------------------------------------------------------

TYPED_TEST(FaultInjection, CachingResourceChurnKeepsItsBlocks) {
  const device_id d = this->dev();
  auto device = device_upstream(d);
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for_each_allocation_point([&](injection& inj) -> int {
    injected_resource upstream{*device, inj};
    std::mt19937_64 random{seed};
    int reached = 0;
    {
      mr::caching_options options;
      options.thread_cache_size = 0;
      mr::caching_resource resource{d, options, &upstream.tracking};
      stream s{d};
      struct block {
        void* p;
        std::size_t bytes;
        std::uint64_t seed;
      };
      std::vector<block> live;
      for (int step = 0; step < 40; ++step) {
        if (!live.empty() && random() % 3 == 0) {
          const std::size_t i = random() % live.size();
          resource.deallocate(live[i].p, live[i].bytes, s);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        const std::size_t bytes = random() % 2 == 0 ? 512 + random() % (1 << 20) : (1 << 20) + random() % (6 << 20);
        const auto in_use_before = resource.statistics().allocated_bytes;
        try {
          void* p = resource.allocate(bytes, s);
          const std::uint64_t block_seed = random();
          test::device_fill_pattern(s, p, bytes, block_seed);
          live.push_back({p, bytes, block_seed});
        } catch (const std::bad_alloc&) {
          ++reached;
          EXPECT_EQ(resource.statistics().allocated_bytes, in_use_before);
          inj.fail_at = 0;  // memory is back
        }
      }
      // Every block still holds what was written into it.
      for (const auto& b : live) {
        bytes_t back(b.bytes);
        copy(back.data(), b.p, b.bytes, s);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < b.bytes; ++i) wrong += back[i] != test::pattern_byte(b.seed, i) ? 1 : 0;
        EXPECT_EQ(wrong, 0U) << "a block of " << b.bytes << " bytes lost its contents";
        resource.deallocate(b.p, b.bytes, s);
      }
      s.synchronize();
    }  // the resource gives everything back
    EXPECT_EQ(upstream.tracking.live_count(), 0U) << upstream.tracking.leak_report();
    return reached;
  });
}

}  // namespace
}  // namespace syncmem
