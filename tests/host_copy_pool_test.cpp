// ctest-labels: threaded
// The transfer engine's host copy pool: plain copies at many sizes and thread
// counts, staged jobs through a ring of buffers in both directions, gates
// that hold the threads back until an event completes, and jobs stopped
// before they finish.
#include "transfer/host_copy_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/event.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::test {
namespace {

using detail::host_copy_pool;
using job = host_copy_pool::job;
constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

std::vector<std::byte> random_block(std::size_t n) {
  const auto bytes = random_bytes(n);
  std::vector<std::byte> out(n);
  if (n > 0) std::memcpy(out.data(), bytes.data(), n);  // an empty vector's data() may be null
  return out;
}

// Chunks of random sizes in [least, most] that cover `bytes` (the last one
// may be shorter).
std::vector<job::chunk> random_chunks(std::size_t bytes, std::size_t most, std::size_t least = 1) {
  std::vector<job::chunk> chunks;
  std::uniform_int_distribution<std::size_t> size{least, most};
  for (std::size_t at = 0; at < bytes;) {
    const std::size_t n = std::min(size(rng()), bytes - at);
    chunks.push_back({at, n});
    at += n;
  }
  return chunks;
}

TEST(HostCopyPool, CopiesEveryByteAtManySizesOffsetsAndThreadCounts) {
  auto& pool = host_copy_pool::instance();
  std::uniform_int_distribution<std::size_t> offset{0, 63};
  for (const std::size_t size :
       {std::size_t{0}, std::size_t{1}, std::size_t{4095}, 2 * host_copy_pool::min_piece - 1,
        2 * host_copy_pool::min_piece + 17, std::size_t{3} * MiB + 5, std::size_t{9} * MiB + 4097}) {
    for (const int threads : {1, 2, 3, 8, 17}) {
      const std::size_t in = offset(rng());
      const std::size_t out = offset(rng());
      const auto src = random_block(size + in + 1);  // never empty: its data() is a real pointer even for 0 bytes
      auto dst = random_block(size + out + 64);
      const auto before = dst;
      pool.copy(dst.data() + out, src.data() + in, size, threads);
      ASSERT_EQ(std::memcmp(dst.data() + out, src.data() + in, size), 0) << size << " bytes, " << threads << " threads";
      // Nothing outside the destination range was written.
      ASSERT_EQ(std::memcmp(dst.data(), before.data(), out), 0);
      ASSERT_EQ(std::memcmp(dst.data() + out + size, before.data() + out + size, 64), 0);
    }
  }
}

// `rounds` copies of fresh random bytes, sizes in [smallest, largest], through
// the pool with `threads` threads each; how many arrived wrong.
int wrong_copies(std::uint64_t seed, std::size_t smallest, std::size_t largest, int rounds, int threads) {
  auto& pool = host_copy_pool::instance();
  std::mt19937_64 local{seed};
  std::uniform_int_distribution<std::size_t> size{smallest, largest};
  int wrong = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::size_t n = size(local);
    std::vector<std::uint8_t> src(n);
    const std::uint64_t fill = local();
    for (std::size_t i = 0; i < n; ++i) src[i] = pattern_byte(fill, i);
    std::vector<std::uint8_t> dst(n, 0);
    pool.copy(dst.data(), src.data(), n, threads);
    if (dst != src) ++wrong;
  }
  return wrong;
}

TEST(HostCopyPool, ManyCallersAtOnce) {
  constexpr int callers = 4;
  std::vector<std::uint64_t> seeds;
  for (int c = 0; c < callers; ++c) seeds.push_back(fresh_seed());
  std::vector<std::thread> threads;
  std::vector<int> mismatches(callers, 0);
  for (int c = 0; c < callers; ++c) {
    threads.emplace_back([&, c] {
      const auto i = static_cast<std::size_t>(c);
      mismatches[i] = wrong_copies(seeds[i], 1, 3 * MiB, 30, 4);
    });
  }
  for (auto& t : threads) t.join();
  for (int c = 0; c < callers; ++c) EXPECT_EQ(mismatches[static_cast<std::size_t>(c)], 0) << "caller " << c;
}

// More callers at once than the pool has slots for (16): the jobs that find
// no slot are copied by their callers alone, the others with pool threads,
// and every byte arrives either way.
TEST(HostCopyPool, MoreCallersThanTheSlotsOfThePool) {
  constexpr int callers = 24;
  std::vector<std::uint64_t> seeds;
  for (int c = 0; c < callers; ++c) seeds.push_back(fresh_seed());
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  std::vector<int> mismatches(callers, 0);
  for (int c = 0; c < callers; ++c) {
    threads.emplace_back([&, c] {
      ready.fetch_add(1);
      while (ready.load() < callers) std::this_thread::yield();  // start together
      const auto i = static_cast<std::size_t>(c);
      mismatches[i] = wrong_copies(seeds[i], 2 * host_copy_pool::min_piece, MiB, 8, 3);
    });
  }
  for (auto& t : threads) t.join();
  for (int c = 0; c < callers; ++c) EXPECT_EQ(mismatches[static_cast<std::size_t>(c)], 0) << "caller " << c;
}

// Demotes what earlier tests left this thread, waits until what they left the
// pool threads is done, and returns host_copy_pool::demoted_bytes() then.
std::uint64_t settled_demoted_bytes() {
  host_copy_pool::demote_pending();
  std::uint64_t last = host_copy_pool::demoted_bytes();
  for (int calm = 0; calm < 5;) {
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
    const std::uint64_t now = host_copy_pool::demoted_bytes();
    calm = now == last ? calm + 1 : 0;
    last = now;
  }
  return last;
}

// The engine's loop without a device: a ring of two buffers, each chunk
// finished, taken out of (or put into) its buffer by the caller, and the
// buffer reopened for the chunk two ahead. `stores` gives set_stores' two
// chunk indices for a job of that many chunks (none: streaming stores only).
// Every byte arrives, and the threads demote each byte of the chunks from the
// second index on once, before their pieces are done (where the CPU can).
template <class Stores>
void expect_upload_through_a_ring(Stores stores) {
  const std::size_t bytes = 5 * MiB + 333;
  const auto chunks = random_chunks(bytes, 700 * KiB);
  const auto src = random_block(bytes);
  std::vector<std::byte> out(bytes);
  std::vector<std::vector<std::byte>> ring(2, std::vector<std::byte>(700 * KiB));
  const auto [ordinary_from, demoted_from] = stores(chunks.size());
  std::uint64_t demoting = 0;
  for (std::size_t i = demoted_from; i < chunks.size(); ++i) demoting += chunks[i].bytes;
  const std::uint64_t before = settled_demoted_bytes();
  {
    job j{host_copy_pool::instance(), job::direction::to_staging, nullptr, src.data(), chunks, 6};
    j.set_stores(ordinary_from, demoted_from);
    ASSERT_EQ(j.chunks(), chunks.size());
    for (std::size_t i = 0; i < std::min<std::size_t>(2, chunks.size()); ++i) j.open(i, ring[i].data(), nullptr);
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      j.finish(i);
      std::memcpy(out.data() + chunks[i].offset, ring[i % 2].data(), chunks[i].bytes);
      if (i + 2 < chunks.size()) j.open(i + 2, ring[i % 2].data(), nullptr);
    }
  }
  EXPECT_EQ(out, src) << "ordinary from chunk " << ordinary_from << ", demoted from " << demoted_from << " of "
                      << chunks.size();
  EXPECT_EQ(host_copy_pool::demoted_bytes() - before, host_copy_pool::can_demote() ? demoting : 0U);
}

TEST(HostCopyPoolJob, ToStagingThroughARingOfBuffers) {
  expect_upload_through_a_ring([](std::size_t n) { return std::pair{n, n}; });
}

TEST(HostCopyPoolJob, ToStagingWithOrdinaryStoresThroughARingOfBuffers) {
  expect_upload_through_a_ring([](std::size_t n) { return std::pair{std::size_t{0}, n}; });
}

// Streaming stores, then ordinary ones, then ordinary ones demoted, from
// random chunks on (the engine's large uploads: copy_paths.cpp, "Stores").
TEST(HostCopyPoolJob, ToStagingWithMixedStoresThroughARingOfBuffers) {
  for (int trial = 0; trial < 4; ++trial) {
    expect_upload_through_a_ring([](std::size_t n) {
      const std::size_t ordinary_from = rng()() % (n + 1);
      return std::pair{ordinary_from, ordinary_from + rng()() % (n - ordinary_from + 1)};
    });
  }
}

// Runs `j` (from_staging, over `chunks`) as the engine runs a download
// through `ring` (three buffers, which outlive the job as the engine's do),
// filling each buffer from `src` before its chunk is opened.
void download_through_a_ring(job& j, const std::vector<job::chunk>& chunks, const std::vector<std::byte>& src,
                             std::vector<std::vector<std::byte>>& ring) {
  auto fill = [&](std::size_t i) {
    std::memcpy(ring[i % 3].data(), src.data() + chunks[i].offset, chunks[i].bytes);
    j.open(i, ring[i % 3].data(), nullptr);
  };
  for (std::size_t i = 0; i < std::min<std::size_t>(3, chunks.size()); ++i) fill(i);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    j.finish(i);
    if (i + 3 < chunks.size()) fill(i + 3);
  }
}

TEST(HostCopyPoolJob, FromStagingThroughARingOfBuffers) {
  const std::size_t bytes = 4 * MiB + 4095;
  const auto chunks = random_chunks(bytes, 900 * KiB);
  const auto src = random_block(bytes);
  std::vector<std::byte> dst(bytes);
  std::vector<std::vector<std::byte>> ring(3, std::vector<std::byte>(900 * KiB));
  job j{host_copy_pool::instance(), job::direction::from_staging, dst.data(), nullptr, chunks, 8};
  download_through_a_ring(j, chunks, src, ring);
  EXPECT_EQ(dst, src);
}

// A from_staging job's threads demote every staging byte they have read
// exactly once: the pool threads when they would otherwise wait, after the
// job has ended at the latest, the caller at its next wait (here
// demote_pending); one told to keep its lines demotes none. Every byte
// arrives either way. Chunks of 256 KiB and more keep a job under 64 pieces,
// so that no thread's list of ranges drops any.
TEST(HostCopyPoolJob, FromStagingDemotesWhatItReadOnceUnlessToldToKeepTheLines) {
  std::uniform_int_distribution<std::size_t> extra{0, MiB};
  std::uniform_int_distribution<int> threads{2, 12};
  for (const bool keep : {true, false, true, false}) {
    const std::size_t bytes = 2 * MiB + extra(rng());
    const auto chunks = random_chunks(bytes, 700 * KiB, 256 * KiB);
    const auto src = random_block(bytes);
    std::vector<std::byte> dst(bytes);
    std::vector<std::vector<std::byte>> ring(3, std::vector<std::byte>(700 * KiB));
    const std::uint64_t before = settled_demoted_bytes();
    {
      job j{host_copy_pool::instance(), job::direction::from_staging, dst.data(), nullptr, chunks, threads(rng())};
      if (keep) j.keep_staging_lines();
      download_through_a_ring(j, chunks, src, ring);
    }
    ASSERT_EQ(dst, src) << (keep ? "keeping" : "demoting") << " the lines, " << bytes << " bytes";
    host_copy_pool::demote_pending();  // the caller's share
    // The pool threads demote what they read once they find no work.
    const std::uint64_t demoting = keep ? 0 : bytes;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    while (host_copy_pool::demoted_bytes() - before < demoting && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
    }
    EXPECT_EQ(settled_demoted_bytes() - before, demoting)
        << (keep ? "keeping" : "demoting") << " the lines, " << bytes << " bytes in " << chunks.size() << " chunks";
  }
}

// A thread holds a bounded list of what it has read to demote later: a
// scatter of many small chunks (a batch's downloads) drops the oldest once
// the list is full rather than demoting them all on the copy's path, so it
// demotes far less than it read. Every byte arrives.
TEST(HostCopyPoolJob, FromStagingOfManySmallChunksDemotesABoundedPart) {
  std::uniform_int_distribution<std::size_t> size{12 * KiB, 20 * KiB};
  std::vector<job::chunk> chunks;
  std::size_t bytes = 0;
  for (int i = 0; i < 1000; ++i) {
    chunks.push_back({bytes, size(rng())});
    bytes += chunks.back().bytes;
  }
  auto staging = random_block(bytes);
  std::vector<std::byte> dst(bytes);
  const std::uint64_t before = settled_demoted_bytes();
  {
    job j{host_copy_pool::instance(), job::direction::from_staging, dst.data(), nullptr, chunks, 1};
    for (std::size_t i = 0; i < chunks.size(); ++i) j.open(i, staging.data() + chunks[i].offset, nullptr);
    for (std::size_t i = 0; i < chunks.size(); ++i) j.finish(i);
  }
  host_copy_pool::demote_pending();  // one thread: the caller read it all
  EXPECT_EQ(dst, staging);
  const std::uint64_t demoted = settled_demoted_bytes() - before;
  EXPECT_GT(demoted, 0U) << "the last ranges read are demoted";
  EXPECT_LT(demoted, bytes / 2) << "of " << bytes << " bytes read";
}

// The caller of a from_staging job alone (one thread) copies every piece
// without waiting, and the job's end demotes none of what it read, which
// would hold the copy's return back: the caller demotes all of it at its
// next wait (here demote_pending), each byte once.
TEST(HostCopyPoolJob, FromStagingLeavesWhatTheCallerReadForItsNextWait) {
  const std::size_t bytes = 2 * MiB + std::uniform_int_distribution<std::size_t>{0, MiB}(rng());
  const auto chunks = random_chunks(bytes, 700 * KiB, 256 * KiB);  // one piece each: at most 13
  const auto src = random_block(bytes);
  std::vector<std::byte> dst(bytes);
  std::vector<std::vector<std::byte>> ring(3, std::vector<std::byte>(700 * KiB));
  const std::uint64_t before = settled_demoted_bytes();
  {
    job j{host_copy_pool::instance(), job::direction::from_staging, dst.data(), nullptr, chunks, 1};
    download_through_a_ring(j, chunks, src, ring);
  }
  ASSERT_EQ(dst, src);
  EXPECT_EQ(host_copy_pool::demoted_bytes() - before, 0U) << "demoted on the copy's path";
  host_copy_pool::demote_pending();
  EXPECT_EQ(host_copy_pool::demoted_bytes() - before, bytes);
  host_copy_pool::demote_pending();
  EXPECT_EQ(host_copy_pool::demoted_bytes() - before, bytes) << "demoted twice";
}

// A gate holds the threads back, as the engine uses it: on a device's stream
// a sleep, then a DMA into the pinned staging buffer, then the gate's record.
template <class Kind>
class HostCopyPoolGate : public device_test<Kind> {
 protected:
  // Device memory holding pattern_byte(seed, i), and a pinned buffer.
  struct buffers {
    buffers(device_id d, stream_view s, std::size_t n, std::uint64_t seed)
        : dev{d}, stream{s}, bytes{n}, pinned{d.kind()} {
      device = static_cast<std::byte*>(mr::get_per_device_resource(d).allocate(n, s));
      staging = static_cast<std::byte*>(pinned.allocate(n, s));
      device_fill_pattern(s, device, n, seed);
      s.synchronize();
    }
    ~buffers() {
      stream.synchronize();
      pinned.deallocate(staging, bytes, stream);
      mr::get_per_device_resource(dev).deallocate(device, bytes, stream);
    }
    buffers(const buffers&) = delete;
    buffers& operator=(const buffers&) = delete;
    // Enqueues the DMA of the device bytes into the staging buffer.
    void land() {
      device_guard guard{dev};
      detail::backend_for(dev).memcpy_async(staging, device, bytes, dev.index(), stream.handle());
    }
    device_id dev;
    stream_view stream;
    std::size_t bytes;
    mr::pinned_resource pinned;
    std::byte* device = nullptr;
    std::byte* staging = nullptr;
  };
};
TYPED_TEST_SUITE(HostCopyPoolGate, device_kinds, device_kind_names);

// Threads that wrote the staging buffer before the gate would see their bytes
// overwritten by the DMA that lands after the sleep.
TYPED_TEST(HostCopyPoolGate, ToStagingWaitsForTheGate) {
  stream s{this->dev()};
  const std::size_t bytes = 2 * MiB + 12345;
  typename TestFixture::buffers b{this->dev(), s, bytes, fresh_seed()};
  const auto src = random_block(bytes);
  device_sleep(s, std::chrono::milliseconds{30});
  b.land();
  event gate{this->dev()};
  gate.record(s);
  job j{host_copy_pool::instance(), job::direction::to_staging, nullptr, src.data(), {{0, bytes}}, 8};
  j.open(0, b.staging, &gate);
  j.finish(0);
  EXPECT_TRUE(gate.ready());
  s.synchronize();  // a gate not waited for: the DMA lands on the copied bytes
  EXPECT_EQ(std::memcmp(b.staging, src.data(), bytes), 0);
}

// The other way: threads that read the staging buffer before the gate would
// copy its stale bytes.
TYPED_TEST(HostCopyPoolGate, FromStagingWaitsForTheGate) {
  stream s{this->dev()};
  const std::size_t bytes = 3 * MiB + 7;
  const std::uint64_t seed = fresh_seed();
  typename TestFixture::buffers b{this->dev(), s, bytes, seed};
  const auto stale = random_block(bytes);
  std::memcpy(b.staging, stale.data(), bytes);
  std::vector<std::uint8_t> dst(bytes, 0);
  device_sleep(s, std::chrono::milliseconds{30});
  b.land();
  event gate{this->dev()};
  gate.record(s);
  job j{host_copy_pool::instance(),
        job::direction::from_staging,
        reinterpret_cast<std::byte*>(dst.data()),
        nullptr,
        {{0, bytes}},
        8};
  j.open(0, b.staging, &gate);
  j.finish(0);
  EXPECT_TRUE(gate.ready());
  s.synchronize();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < bytes; ++i) wrong += dst[i] != pattern_byte(seed, i) ? 1 : 0;
  EXPECT_EQ(wrong, 0U);
}

// Many small chunks behind two gates, as a batch scatters its downloads:
// every byte after its gate, and one wait per gate, not per chunk.
TYPED_TEST(HostCopyPoolGate, ChunksBehindOneGateWaitForItOnce) {
  stream s{this->dev()};
  const std::size_t chunk = 4096 + 17, chunks = 80, bytes = chunks * chunk;
  const std::uint64_t seed = fresh_seed();
  typename TestFixture::buffers b{this->dev(), s, bytes, seed};
  const auto stale = random_block(bytes);
  std::memcpy(b.staging, stale.data(), bytes);
  std::vector<std::uint8_t> dst(bytes, 0);
  std::vector<job::chunk> ranges;
  for (std::size_t c = 0; c < chunks; ++c) ranges.push_back({c * chunk, chunk});
  const std::uint64_t before = host_copy_pool::gate_waits();
  b.land();
  event first{this->dev()}, second{this->dev()};
  first.record(s);
  second.record(s);
  job j{host_copy_pool::instance(),
        job::direction::from_staging,
        reinterpret_cast<std::byte*>(dst.data()),
        nullptr,
        ranges,
        8};
  for (std::size_t c = 0; c < chunks; ++c) {
    if (c == 0 || c == chunks / 2) {
      j.open(c, b.staging + c * chunk, c == 0 ? &first : &second);
    } else {
      j.open_behind_previous(c, b.staging + c * chunk, nullptr);
    }
  }
  for (std::size_t c = 0; c < chunks; ++c) j.finish(c);
  EXPECT_EQ(host_copy_pool::gate_waits() - before, 2U);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < bytes; ++i) wrong += dst[i] != pattern_byte(seed, i) ? 1 : 0;
  EXPECT_EQ(wrong, 0U);
}

// A ring reuses its events: a chunk opened behind the same event as the chunk
// before it, recorded again in between, waits for the new record. Chunk 0
// passes its gate; then, with the stream held on a latch, the DMA into the
// staging and the event's second record are queued, and chunk 1 opened
// behind it must copy the bytes that DMA brings, not the stale ones.
TYPED_TEST(HostCopyPoolGate, ChunkBehindAnEventRecordedAgainWaitsForTheNewRecord) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream s{this->dev()};
  const std::size_t chunk = 256 * KiB + 77, bytes = 2 * chunk;
  const std::uint64_t seed = fresh_seed();
  typename TestFixture::buffers b{this->dev(), s, bytes, seed};
  const auto stale = random_block(bytes);
  std::memcpy(b.staging, stale.data(), bytes);
  std::vector<std::uint8_t> dst(bytes, 0);
  event gate{this->dev()};
  gate.record(s);
  s.synchronize();
  stream_latch hold{s};
  b.land();
  const std::size_t fresh_in_chunk_1 = while_held(hold, [&] {
    job j{host_copy_pool::instance(),
          job::direction::from_staging,
          reinterpret_cast<std::byte*>(dst.data()),
          nullptr,
          {{0, chunk}, {chunk, chunk}},
          8};
    j.open(0, b.staging, &gate);
    j.finish(0);
    gate.record(s);  // behind the latch and the DMA
    j.open(1, b.staging + chunk, &gate);
    j.finish(1);
    std::size_t fresh = 0;
    for (std::size_t i = chunk; i < bytes; ++i) fresh += dst[i] == pattern_byte(seed, i) ? 1 : 0;
    return fresh;
  });
  s.synchronize();
  EXPECT_EQ(fresh_in_chunk_1, chunk) << "chunk 1 copied the staging before the DMA its gate waits for";
  EXPECT_EQ(std::memcmp(dst.data(), stale.data(), chunk), 0) << "chunk 0 is the staging as it was before the DMA";
}

TEST(HostCopyPoolJob, OpeningTheFirstChunkBehindAPreviousOneIsRefused) {
  std::vector<std::byte> src(4096), dst(4096);
  job j{host_copy_pool::instance(), job::direction::host_to_host, dst.data(), src.data(), {{0, 4096}}, 2};
  EXPECT_THROW(j.open_behind_previous(0, nullptr, nullptr), logic_error);
  j.open(0, nullptr, nullptr);
  j.finish(0);
}

// A job destroyed before it finishes copies nothing afterwards: pieces held
// back by a late gate either ran before the destructor returned or never.
TEST(HostCopyPoolJob, StoppedJobTouchesNothingAfterItsEnd) {
  const device_id d{device_kind::emulated, 0};
  stream s{d};
  const std::size_t bytes = 4 * MiB;
  const auto src = random_block(bytes);
  std::vector<std::byte> dst(bytes);
  std::vector<std::byte> late(bytes);
  device_sleep(s, std::chrono::milliseconds{20});
  event gate{d};
  gate.record(s);
  {
    job j{host_copy_pool::instance(),
          job::direction::host_to_host,
          dst.data(),
          src.data(),
          {{0, MiB}, {MiB, MiB}, {2 * MiB, 2 * MiB}},
          8};
    j.open(0, nullptr, nullptr);
    j.open(1, nullptr, &gate);
    j.open(2, nullptr, nullptr);
    j.finish(0);
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), MiB), 0);
  }
  const auto after = dst;
  s.synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds{20});
  EXPECT_EQ(dst, after);
  // Whatever was copied is the source's bytes, nothing else.
  for (std::size_t i = 0; i < bytes; ++i) {
    if (dst[i] != std::byte{0}) {
      ASSERT_EQ(dst[i], src[i]) << "byte " << i;
    }
  }
}

// The number of pool threads on a job changes while it runs (the engine paces
// uploads that way): fewer, none (the caller alone), then all again; every
// byte arrives, none outside the chunks is written.
TEST(HostCopyPoolJob, HelpersChangeWhileItRuns) {
  const std::size_t bytes = 12 * MiB + 333;
  const auto src = random_block(bytes);
  auto dst = random_block(bytes + 64);
  const auto before = dst;
  const auto chunks = random_chunks(bytes, 2 * MiB);
  job j{host_copy_pool::instance(), job::direction::host_to_host, dst.data(), src.data(), chunks, 8};
  EXPECT_EQ(j.helpers(), 7);
  std::uniform_int_distribution<int> helpers{-1, 9};
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const int wanted = helpers(rng());
    j.set_helpers(wanted);
    EXPECT_EQ(j.helpers(), std::clamp(wanted, 0, 7));
    j.open(c, nullptr, nullptr);
    j.finish(c);
    ASSERT_EQ(std::memcmp(dst.data() + chunks[c].offset, src.data() + chunks[c].offset, chunks[c].bytes), 0)
        << "chunk " << c << " with " << wanted << " helpers";
  }
  j.stop();
  EXPECT_EQ(std::memcmp(dst.data() + bytes, before.data() + bytes, 64), 0);
}

TEST(HostCopyPoolJob, OneThreadCopiesOnTheCaller) {
  const std::size_t bytes = 3 * MiB + 1;
  const auto src = random_block(bytes);
  std::vector<std::byte> dst(bytes);
  const auto chunks = random_chunks(bytes, MiB);
  job j{host_copy_pool::instance(), job::direction::host_to_host, dst.data(), src.data(), chunks, 1};
  for (std::size_t i = 0; i < chunks.size(); ++i) j.open(i, nullptr, nullptr);
  for (std::size_t i = 0; i < chunks.size(); ++i) j.finish(i);
  EXPECT_EQ(dst, src);
}

// finished(c) is true once chunk c is open and all of it is copied, by the
// caller's finish or by pool threads alone.
TEST(HostCopyPoolJob, FinishedSaysWhetherAChunkIsOpenAndCopied) {
  const std::size_t bytes = 3 * MiB + 17;
  const auto src = random_block(bytes);
  std::vector<std::byte> dst(bytes);
  const auto chunks = random_chunks(bytes, MiB);
  ASSERT_GE(chunks.size(), 3U);
  {
    job j{host_copy_pool::instance(), job::direction::host_to_host, dst.data(), src.data(), chunks, 1};
    EXPECT_FALSE(j.finished(0));  // not open
    j.open(0, nullptr, nullptr);
    EXPECT_FALSE(j.finished(0));  // open, but one thread copies only in finish
    EXPECT_FALSE(j.finished(1));
    j.finish(0);
    EXPECT_TRUE(j.finished(0));
    EXPECT_FALSE(j.finished(1));
    for (std::size_t c = 1; c < chunks.size(); ++c) {
      j.open(c, nullptr, nullptr);
      j.finish(c);
      EXPECT_TRUE(j.finished(c));
    }
  }
  EXPECT_EQ(dst, src);

  const auto other = random_block(bytes);
  job j{host_copy_pool::instance(), job::direction::host_to_host, dst.data(), other.data(), chunks, 8};
  for (std::size_t c = 0; c < chunks.size(); ++c) j.open(c, nullptr, nullptr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{30};
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    while (!j.finished(c) && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    ASSERT_TRUE(j.finished(c)) << "chunk " << c << " was not copied by the pool threads";
    EXPECT_EQ(std::memcmp(dst.data() + chunks[c].offset, other.data() + chunks[c].offset, chunks[c].bytes), 0);
  }
  j.stop();
  EXPECT_EQ(dst, other);
}

// Streaming stores of every width copy every byte, at any size and alignment
// of either side, and nothing outside the destination changes. Widths the CPU
// lacks fall back to narrower stores, so each width is asked for on every
// machine.
TEST(HostCopyPool, StreamingStoresOfEveryWidthCopyEveryByte) {
  constexpr std::size_t guard = 256;
  std::uniform_int_distribution<std::size_t> offset{0, 127};
  std::uniform_int_distribution<std::size_t> any_size{0, 3 * MiB};
  for (const int width : {64, 16, 0}) {
    std::vector<std::size_t> sizes{0, 1, 15, 63, 64, 65, 255, 256, 257, 64 * KiB - 1, 64 * KiB + 1};
    for (int i = 0; i < 8; ++i) sizes.push_back(any_size(rng()));
    for (const std::size_t size : sizes) {
      const std::size_t from = offset(rng());
      const std::size_t to = offset(rng());
      const auto src = random_block(size + 128);
      auto dst = random_block(size + 128 + 2 * guard);
      const auto before = dst;
      host_copy_pool::copy_streaming(dst.data() + guard + to, src.data() + from, size, width);
      const auto at = [&](std::size_t n) { return static_cast<std::ptrdiff_t>(n); };
      ASSERT_TRUE(std::equal(src.begin() + at(from), src.begin() + at(from + size), dst.begin() + at(guard + to)))
          << width << "-byte stores, " << size << " bytes from offset " << from << " to offset " << to;
      ASSERT_TRUE(std::equal(before.begin(), before.begin() + at(guard + to), dst.begin()))
          << width << "-byte stores wrote before the destination, " << size << " bytes";
      ASSERT_TRUE(std::equal(before.begin() + at(guard + to + size), before.end(), dst.begin() + at(guard + to + size)))
          << width << "-byte stores wrote past the destination, " << size << " bytes";
    }
  }
  const int widest = host_copy_pool::widest_streaming_store();
  EXPECT_TRUE(widest == 0 || widest == 16 || widest == 64) << widest;
}

// Demoting lines out of the core's caches is a hint: no byte changes, at any
// alignment and size.
TEST(HostCopyPool, DemoteChangesNoByte) {
  const auto block = random_block(MiB + 200);
  auto copy = block;
  std::uniform_int_distribution<std::size_t> offset{0, 127};
  for (const std::size_t size :
       {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{65}, std::size_t{4097}, MiB}) {
    host_copy_pool::demote(copy.data() + offset(rng()), size);
    ASSERT_EQ(copy, block) << size << " bytes";
  }
}

}  // namespace
}  // namespace syncmem::test
