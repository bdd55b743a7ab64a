// ctest-labels: threaded
// The pacing of staged copies: how they are cut into chunks and how many
// threads copy them, and, on a stream held on a latch, how a paced upload
// drops threads and merges chunks while its DMAs are queued, takes every
// thread back once the link is about to run dry, and reopens a buffer only
// behind the DMA that read it.
#include "transfer/staging_pacer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "device_ops.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"
#include "transfer/host_copy_pool.hpp"

namespace syncmem::test {
namespace {

using detail::host_copy_pool;
using pacer = detail::staging_pacer;
using job = host_copy_pool::job;
constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

// A staged copy's chunks: an upload's grow by half (rounded up to whole
// pages), a copy between devices' double, from min_chunk up to max_chunk;
// together they cover the copy once, in order. (A download's: below.)
TEST(StagingPacerPlan, UploadsGrowByHalfCopiesBetweenDevicesDouble) {
  const copy_options defaults;
  std::size_t largest = 0;
  std::vector<std::size_t> sizes;
  for (const auto& c : pacer::plan_chunks(64 * MiB, defaults, pacer::growth::by_half, largest)) {
    sizes.push_back(c.bytes / KiB);
  }
  EXPECT_THAT(sizes, ::testing::ElementsAre(512, 768, 1152, 1728, 2592, 3888, 4096, 4096, 4096, 4096, 4096, 4096, 4096,
                                            4096, 4096, 4096, 4096, 4096, 4096, 1648));
  EXPECT_EQ(largest, 4 * MiB);
  sizes.clear();
  for (const auto& c : pacer::plan_chunks(8 * MiB, defaults, pacer::growth::doubling, largest)) {
    sizes.push_back(c.bytes / KiB);
  }
  EXPECT_THAT(sizes, ::testing::ElementsAre(512, 1024, 2048, 4096, 512));
  sizes.clear();
  for (const auto& c : pacer::plan_chunks(8 * MiB, defaults, pacer::growth::doubling_then_halving, largest)) {
    sizes.push_back(c.bytes / KiB);
  }
  EXPECT_THAT(sizes, ::testing::ElementsAre(512, 1024, 2048, 2304, 1152, 576, 576));
  EXPECT_EQ(largest, 2304 * KiB);

  auto& random = rng();
  for (int trial = 0; trial < 300; ++trial) {
    copy_options o;
    o.min_chunk = 1 + random() % (2 * MiB);
    o.max_chunk = trial % 5 == 0 ? o.min_chunk : o.min_chunk + random() % (16 * MiB);
    const std::size_t bytes = 1 + random() % (trial % 2 == 0 ? 64 * MiB : 4 * o.max_chunk);
    for (const auto growth : {pacer::growth::by_half, pacer::growth::doubling}) {
      const auto chunks = pacer::plan_chunks(bytes, o, growth, largest);
      ASSERT_FALSE(chunks.empty());
      std::size_t offset = 0;
      std::size_t expected = o.min_chunk;
      std::size_t most = 0;
      for (std::size_t i = 0; i < chunks.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << "trial " << trial << ", chunk " << i << " of " << bytes << " bytes, min "
                                          << o.min_chunk << ", max " << o.max_chunk);
        ASSERT_EQ(chunks[i].offset, offset);
        ASSERT_EQ(chunks[i].bytes, std::min(expected, bytes - offset));  // only the last one short
        offset += chunks[i].bytes;
        most = std::max(most, chunks[i].bytes);
        expected = growth == pacer::growth::doubling
                       ? std::min(2 * expected, o.max_chunk)
                       : std::min((expected + expected / 2 + 4095) / 4096 * 4096, o.max_chunk);
      }
      EXPECT_EQ(offset, bytes);
      EXPECT_EQ(largest, most);
    }
  }
}

// A download's chunks double as a copy between devices' do, but none takes
// more than half the bytes left (rounded up to whole pages), and none leaves
// less than min_chunk behind it: its last chunks halve down to about
// min_chunk, and no chunk is larger than max_chunk.
TEST(StagingPacerPlan, DownloadsDoubleThenHalve) {
  const copy_options defaults;
  std::size_t largest = 0;
  std::vector<std::size_t> sizes;
  for (const std::size_t bytes : {300 * KiB, 1 * MiB, 4 * MiB}) {
    for (const auto& c : pacer::plan_chunks(bytes, defaults, pacer::growth::doubling_then_halving, largest)) {
      sizes.push_back(c.bytes / KiB);
    }
  }
  EXPECT_THAT(sizes, ::testing::ElementsAre(300, 512, 512, 512, 1024, 1280, 640, 640));

  auto& random = rng();
  for (int trial = 0; trial < 500; ++trial) {
    copy_options o;
    o.min_chunk = 1 + random() % (2 * MiB);
    o.max_chunk = trial % 5 == 0 ? o.min_chunk : o.min_chunk + random() % (16 * MiB);
    const std::size_t bytes = 1 + random() % (trial % 2 == 0 ? 64 * MiB : 4 * o.max_chunk);
    const std::size_t floor = std::max<std::size_t>(o.min_chunk, 1);
    const auto chunks = pacer::plan_chunks(bytes, o, pacer::growth::doubling_then_halving, largest);
    ASSERT_FALSE(chunks.empty());
    std::size_t offset = 0;
    std::size_t doubling = o.min_chunk;  // the chunk a plain doubling plan would take here
    std::size_t most = 0;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "trial " << trial << ", chunk " << i << " of " << bytes << " bytes, min "
                                        << o.min_chunk << ", max " << o.max_chunk);
      const std::size_t left = bytes - offset;
      const std::size_t half = (left / 2 + 4095) / 4096 * 4096;
      const std::size_t n = chunks[i].bytes;
      ASSERT_EQ(chunks[i].offset, offset);
      ASSERT_LE(n, o.max_chunk);
      const std::size_t planned = std::min({doubling, left, std::max(half, floor)});
      // Less than min_chunk left behind: the rest, or all of it but min_chunk where the rest is too large.
      ASSERT_EQ(n, left - planned >= floor ? planned : (left <= o.max_chunk ? left : left - floor));
      if (i + 1 < chunks.size()) {
        ASSERT_GE(left - n, floor);
      } else {
        ASSERT_EQ(n, left);
      }
      offset += n;
      most = std::max(most, n);
      doubling = std::min(2 * doubling, o.max_chunk);
    }
    EXPECT_EQ(offset, bytes);
    EXPECT_EQ(largest, most);
  }
}

// Which chunks of a single upload get ordinary stores and which are demoted,
// with the engine's chunk plans: none up to 2 MiB; every chunk after the
// first two up to 8 MiB, demoted; above that the chunks after the first
// five, the last three of them demoted. With random thresholds the same holds
// on either side of each, and for plans shorter than the head.
TEST(StagingPacerPlan, SingleUploadsWriteTheirLaterChunksWithOrdinaryStores) {
  const copy_options defaults;
  const auto stores_of = [&](std::size_t bytes) {
    std::size_t largest = 0;
    const std::size_t n = pacer::plan_chunks(bytes, defaults, pacer::growth::by_half, largest).size();
    const auto s = pacer::upload_stores(bytes, n);
    return std::vector<std::size_t>{n, s.ordinary_from, s.demoted_from};
  };
  EXPECT_THAT(stores_of(1 * MiB), ::testing::ElementsAre(2, 2, 2));  // none: from the end on
  EXPECT_THAT(stores_of(2 * MiB), ::testing::ElementsAre(3, 3, 3));
  EXPECT_THAT(stores_of(2 * MiB + 1), ::testing::ElementsAre(3, 2, 2));
  EXPECT_THAT(stores_of(4 * MiB), ::testing::ElementsAre(4, 2, 2));
  EXPECT_THAT(stores_of(8 * MiB), ::testing::ElementsAre(6, 2, 2));
  EXPECT_THAT(stores_of(8 * MiB + 1), ::testing::ElementsAre(6, 5, 5));
  EXPECT_THAT(stores_of(16 * MiB), ::testing::ElementsAre(8, 5, 5));
  EXPECT_THAT(stores_of(64 * MiB), ::testing::ElementsAre(20, 5, 17));

  auto& random = rng();
  for (int trial = 0; trial < 300; ++trial) {
    detail::staging_thresholds t;
    t.ordinary_stores_above = 1 + random() % (8 * MiB);
    t.demote_every_ordinary_chunk_up_to = t.ordinary_stores_above + random() % (8 * MiB);
    const std::size_t chunks = 1 + random() % 12;
    const std::size_t below = 1 + random() % t.ordinary_stores_above;
    const std::size_t long_one = t.demote_every_ordinary_chunk_up_to + 1 + random() % (64 * MiB);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", " << chunks << " chunks, thresholds "
                                      << t.ordinary_stores_above << " and " << t.demote_every_ordinary_chunk_up_to);
    const auto none = pacer::upload_stores(below, chunks, t);
    EXPECT_EQ(none.ordinary_from, chunks);
    EXPECT_EQ(none.demoted_from, chunks);
    if (t.demote_every_ordinary_chunk_up_to > t.ordinary_stores_above) {
      const std::size_t short_one =
          t.ordinary_stores_above + 1 + random() % (t.demote_every_ordinary_chunk_up_to - t.ordinary_stores_above);
      const auto all_demoted = pacer::upload_stores(short_one, chunks, t);
      EXPECT_EQ(all_demoted.ordinary_from, std::min<std::size_t>(chunks, 2));
      EXPECT_EQ(all_demoted.demoted_from, std::min<std::size_t>(chunks, 2));
    }
    const auto tail_demoted = pacer::upload_stores(long_one, chunks, t);
    EXPECT_EQ(tail_demoted.ordinary_from, std::min<std::size_t>(chunks, 5));
    EXPECT_EQ(tail_demoted.demoted_from, chunks <= 5 ? chunks : std::max<std::size_t>(5, chunks - 3));
  }
}

// A staged upload with ordinary stores takes twice the pool's default up to
// most_threads_for_uploads_up_to and half as many again above it; one with
// streaming stores half as many again when short, the default otherwise. A
// batch's uploads over the batch's threshold take twice the default (their
// host side limits them), half as many again when short, whatever the single
// uploads' threshold; what the options set wins over all.
TEST(StagingPacerThreads, UploadsTakeThreadsByTheirSizeAndStores) {
  {
    const copy_options o;
    const detail::staging_thresholds t;  // ordinary stores above 2 MiB
    for (const int usual : {1, 3, 8}) {
      EXPECT_EQ(pacer::upload_threads(1 * MiB, o, t, usual), usual * 3 / 2);
      EXPECT_EQ(pacer::upload_threads(t.ordinary_stores_above, o, t, usual), usual * 3 / 2);
      EXPECT_EQ(pacer::upload_threads(t.ordinary_stores_above + 1, o, t, usual), usual * 2);
      EXPECT_EQ(pacer::upload_threads(pacer::more_threads_for_uploads_up_to + 1, o, t, usual), usual * 2);
      EXPECT_EQ(pacer::upload_threads(pacer::most_threads_for_uploads_up_to, o, t, usual), usual * 2);
      EXPECT_EQ(pacer::upload_threads(pacer::most_threads_for_uploads_up_to + 1, o, t, usual), usual * 3 / 2);
      EXPECT_EQ(pacer::upload_threads(256 * MiB, o, t, usual), usual * 3 / 2);
    }
  }
  auto& random = rng();
  const std::size_t more = pacer::more_threads_for_uploads_up_to;
  const std::size_t most = pacer::most_threads_for_uploads_up_to;
  for (int trial = 0; trial < 200; ++trial) {
    const int usual = 1 + static_cast<int>(random() % 8);
    detail::staging_thresholds t;
    // Above the short uploads' limit, on either side of the most threads' one.
    t.ordinary_stores_above = more + 1 + random() % (64 * MiB);
    t.batch_ordinary_stores_above = t.ordinary_stores_above;
    copy_options o;
    const std::size_t short_upload = 1 + random() % more;
    const std::size_t middle = more + 1 + random() % (t.ordinary_stores_above - more);
    const std::size_t large = std::max(t.ordinary_stores_above, most) + 1 + random() % (256 * MiB);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", usual " << usual << ", threshold "
                                      << t.ordinary_stores_above << ", middle " << middle << ", large " << large);
    EXPECT_EQ(pacer::upload_threads(short_upload, o, t, usual), usual * 3 / 2);
    EXPECT_EQ(pacer::upload_threads(middle, o, t, usual), usual);
    EXPECT_EQ(pacer::upload_threads(large, o, t, usual), usual * 3 / 2);
    if (t.ordinary_stores_above < most) {
      const std::size_t ordinary = t.ordinary_stores_above + 1 + random() % (most - t.ordinary_stores_above);
      EXPECT_EQ(pacer::upload_threads(ordinary, o, t, usual), usual * 2) << ordinary;
    }
    EXPECT_EQ(pacer::batch_upload_threads(short_upload, o, t, usual), usual * 3 / 2);
    EXPECT_EQ(pacer::batch_upload_threads(middle, o, t, usual), usual);
    EXPECT_EQ(pacer::batch_upload_threads(t.ordinary_stores_above, o, t, usual), usual);
    EXPECT_EQ(pacer::batch_upload_threads(large, o, t, usual), usual * 2);
    // Ordinary stores from below the short uploads' limit: no effect on batches.
    t.ordinary_stores_above = 1 + random() % more;
    const std::size_t ordinary_short = t.ordinary_stores_above + 1 + random() % (more - t.ordinary_stores_above + 1);
    EXPECT_EQ(pacer::upload_threads(ordinary_short, o, t, usual), usual * 2) << ordinary_short;
    EXPECT_EQ(pacer::upload_threads(middle, o, t, usual), middle <= most ? usual * 2 : usual * 3 / 2);
    EXPECT_EQ(pacer::upload_threads(large, o, t, usual), usual * 3 / 2);
    EXPECT_EQ(pacer::batch_upload_threads(short_upload, o, t, usual), usual * 3 / 2);
    EXPECT_EQ(pacer::batch_upload_threads(middle, o, t, usual), usual);
    EXPECT_EQ(pacer::batch_upload_threads(large, o, t, usual), usual * 2);
    o.host_threads = 1 + static_cast<int>(random() % 16);
    for (const std::size_t bytes : {short_upload, middle, large}) {
      EXPECT_EQ(pacer::upload_threads(bytes, o, t, usual), o.host_threads);
      EXPECT_EQ(pacer::batch_upload_threads(bytes, o, t, usual), o.host_threads);
    }
  }
}

// Downloads that demote their staging lines or copy out with ordinary stores
// take half as many threads again as the default, others the default, and
// the options' count wins over both.
TEST(StagingPacerThreads, DownloadsTakeThreadsByTheirDemotingAndStores) {
  {
    const copy_options o;
    const detail::staging_thresholds t;  // demoting up to 8 MiB, ordinary stores over 8 MiB up to 32 MiB
    for (const int usual : {1, 3, 8}) {
      EXPECT_EQ(pacer::download_threads(1 * MiB, o, t, usual), usual * 3 / 2);
      EXPECT_EQ(pacer::download_threads(t.demote_downloads_up_to, o, t, usual), usual * 3 / 2);
      EXPECT_EQ(pacer::download_threads(t.demote_downloads_up_to + 1, o, t, usual), usual * 3 / 2);
      EXPECT_EQ(pacer::download_threads(t.ordinary_download_stores_up_to, o, t, usual), usual * 3 / 2);
      EXPECT_EQ(pacer::download_threads(t.ordinary_download_stores_up_to + 1, o, t, usual), usual);
      EXPECT_EQ(pacer::download_threads(256 * MiB, o, t, usual), usual);
    }
    EXPECT_FALSE(pacer::download_ordinary_stores(1 * MiB, t));
    EXPECT_FALSE(pacer::download_ordinary_stores(t.ordinary_download_stores_above, t));
    EXPECT_TRUE(pacer::download_ordinary_stores(t.ordinary_download_stores_above + 1, t));
    EXPECT_TRUE(pacer::download_ordinary_stores(t.ordinary_download_stores_up_to, t));
    EXPECT_FALSE(pacer::download_ordinary_stores(t.ordinary_download_stores_up_to + 1, t));
    // A download demotes or copies out with ordinary stores, never both.
    EXPECT_TRUE(pacer::demotes_download(t.ordinary_download_stores_above, t));
    EXPECT_FALSE(pacer::demotes_download(t.ordinary_download_stores_above + 1, t));
    EXPECT_FALSE(pacer::demotes_download(16 * MiB, t));
  }
  auto& random = rng();
  for (int trial = 0; trial < 200; ++trial) {
    const int usual = 1 + static_cast<int>(random() % 8);
    detail::staging_thresholds t;
    // Demoting up to a random size, then a gap, then a random range of ordinary stores.
    t.demote_downloads_up_to = 1 + random() % (16 * MiB);
    t.ordinary_download_stores_above = t.demote_downloads_up_to + 1 + random() % (16 * MiB);
    t.ordinary_download_stores_up_to = t.ordinary_download_stores_above + 1 + random() % (64 * MiB);
    const std::size_t demoting = 1 + random() % t.demote_downloads_up_to;
    const std::size_t gap =
        t.demote_downloads_up_to + 1 + random() % (t.ordinary_download_stores_above - t.demote_downloads_up_to);
    const std::size_t ordinary = t.ordinary_download_stores_above + 1 +
                                 random() % (t.ordinary_download_stores_up_to - t.ordinary_download_stores_above);
    const std::size_t large = t.ordinary_download_stores_up_to + 1 + random() % (256 * MiB);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", usual " << usual << ", sizes " << demoting << " "
                                      << gap << " " << ordinary << " " << large);
    copy_options o;
    EXPECT_EQ(pacer::download_threads(demoting, o, t, usual), usual * 3 / 2);
    EXPECT_EQ(pacer::download_threads(gap, o, t, usual), usual);
    EXPECT_EQ(pacer::download_threads(ordinary, o, t, usual), usual * 3 / 2);
    EXPECT_EQ(pacer::download_threads(large, o, t, usual), usual);
    EXPECT_FALSE(pacer::download_ordinary_stores(demoting, t));
    EXPECT_FALSE(pacer::download_ordinary_stores(gap, t));
    EXPECT_TRUE(pacer::download_ordinary_stores(ordinary, t));
    EXPECT_FALSE(pacer::download_ordinary_stores(large, t));
    o.host_threads = 1 + static_cast<int>(random() % 16);
    for (const std::size_t bytes : {demoting, gap, ordinary, large}) {
      EXPECT_EQ(pacer::download_threads(bytes, o, t, usual), o.host_threads);
    }
  }
}

// The ring holds as many buffers as the options give, but never more than
// the copy has chunks; each chunk after the first grows from the one before.
TEST(StagingPacerPlan, TheRingHoldsNoMoreBuffersThanChunks) {
  auto& random = rng();
  for (int trial = 0; trial < 200; ++trial) {
    copy_options o;
    o.staging_buffers = 1 + static_cast<int>(random() % 64);
    const std::size_t chunks = 1 + random() % 100;
    EXPECT_EQ(pacer::ring_buffers(o, chunks), std::min(static_cast<std::size_t>(o.staging_buffers), chunks));
    o.min_chunk = 1 + random() % MiB;
    o.max_chunk = o.min_chunk + random() % (8 * MiB);
    std::size_t largest = 0;
    const auto plan = pacer::plan_chunks(8 * o.max_chunk, o, pacer::growth::doubling, largest);
    for (std::size_t i = 1; i + 1 < plan.size(); ++i) {
      ASSERT_EQ(plan[i].bytes, pacer::next_chunk(plan[i - 1].bytes, o, pacer::growth::doubling));
    }
  }
}

template <class Kind>
class StagingPacer : public device_test<Kind> {};
TYPED_TEST_SUITE(StagingPacer, device_kinds, device_kind_names);

// With the stream held, no DMA completes: from the third DMA on, each one
// takes a thread from the job (down to the caller and one helper), and a
// chunk that fills its buffer goes with the next one unless that starts the
// ring again or is past the end. Once the stream has run, the link is about
// to run dry: the job gets every thread back, and nothing is merged unless
// the next chunk is already copied. Fewer than three buffers, or an upload
// with ordinary stores, keep every thread.
TYPED_TEST(StagingPacer, AnUploadDropsThreadsWhileTwoDmasAreQueued) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream s{this->dev()};
  constexpr int threads = 6;
  constexpr std::size_t buffers = 4, chunks = 12;
  std::vector<std::byte> src(chunks * 4096), dst(chunks * 4096);
  std::vector<job::chunk> plan;
  for (std::size_t c = 0; c < chunks; ++c) plan.push_back({c * 4096, 4096});
  job j{host_copy_pool::instance(), job::direction::host_to_host, dst.data(), src.data(), plan, threads};
  auto paced = pacer::upload(buffers, threads, false);
  auto ordinary = pacer::upload(buffers, threads, true);
  auto short_ring = pacer::upload(2, threads, false);
  job other{host_copy_pool::instance(), job::direction::host_to_host, dst.data(), src.data(), plan, threads};
  EXPECT_EQ(j.helpers(), threads - 1);
  {
    stream_latch hold{s};
    std::vector<int> helpers;
    for (std::size_t d = 0; d < 7; ++d) {
      if (d == 2) {  // two DMAs queued
        EXPECT_TRUE(paced.carries_next(j, 1, chunks, true));
        EXPECT_FALSE(paced.carries_next(j, 1, chunks, false)) << "a chunk short of its buffer is not merged";
        EXPECT_FALSE(paced.carries_next(j, buffers - 1, chunks, true)) << "the next chunk starts the ring again";
        EXPECT_FALSE(paced.carries_next(j, chunks - 1, chunks, true)) << "there is no next chunk";
        EXPECT_TRUE(ordinary.carries_next(j, 1, chunks, true)) << "ordinary stores still merge";
        EXPECT_FALSE(short_ring.carries_next(j, 0, chunks, true)) << "two buffers are not paced";
      }
      if (d < 2) {
        EXPECT_FALSE(paced.carries_next(j, d, chunks, true)) << "DMA " << d;
      }
      for (auto* p : {&paced, &ordinary, &short_ring}) {
        job& on = p == &paced ? j : other;
        p->dma_enqueued(on, d % p->buffers());
        EXPECT_NE(p->buffer_used(d % p->buffers(), s, false) == nullptr, p != &short_ring) << "DMA " << d;
      }
      helpers.push_back(j.helpers());
      EXPECT_EQ(other.helpers(), threads - 1) << "DMA " << d;
    }
    EXPECT_THAT(helpers, ::testing::ElementsAre(5, 5, 4, 3, 2, 1, 1));
    EXPECT_FALSE(paced.gate(0)->ready());
  }
  s.synchronize();
  EXPECT_FALSE(paced.carries_next(j, 1, chunks, true)) << "the link is idle and the next chunk not copied";
  paced.dma_enqueued(j, 7 % buffers);
  EXPECT_EQ(j.helpers(), threads - 1) << "the link ran dry: every thread again";
  j.open(0, nullptr, nullptr);
  j.open(1, nullptr, nullptr);
  j.finish(0);
  j.finish(1);
  EXPECT_TRUE(paced.carries_next(j, 0, chunks, true)) << "the next chunk is copied already";
  for (std::size_t c = 2; c < chunks; ++c) {
    j.open(c, nullptr, nullptr);
    j.finish(c);
  }
  EXPECT_EQ(dst, src);
}

// A staged upload through a ring of three pinned buffers, paced, with the
// stream held while it starts: every chunk after the first three reopens a
// buffer behind the event the pacer recorded after the DMA that read it, so
// that every byte reaches the device, none overwritten in its buffer before
// its DMA read it.
TYPED_TEST(StagingPacer, ABufferIsReusedOnlyAfterTheDmaThatReadIt) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  const device_id dev = this->dev();
  stream s{dev};
  const std::size_t chunk = 64 * KiB, chunks = 10 + rng()() % 10, bytes = chunks * chunk - rng()() % chunk;
  const auto src = random_bytes(bytes);
  std::vector<job::chunk> plan;
  for (std::size_t at = 0; at < bytes; at += chunk) plan.push_back({at, std::min(chunk, bytes - at)});
  mr::pinned_resource pinned{dev.kind()};
  auto& device_memory = mr::get_per_device_resource(dev);
  auto* ring = static_cast<std::byte*>(pinned.allocate(3 * chunk, s));
  auto* device = static_cast<std::byte*>(device_memory.allocate(bytes, s));
  stream_latch hold{s};
  while_held(hold, [&] {
    auto paced = pacer::upload(3, 4, false);
    job j{host_copy_pool::instance(),
          job::direction::to_staging,
          nullptr,
          reinterpret_cast<const std::byte*>(src.data()),
          plan,
          4};
    for (std::size_t c = 0; c < 3; ++c) j.open(c, ring + c * chunk, nullptr);
    for (std::size_t c = 0; c < plan.size(); ++c) {
      j.finish(c);
      {
        device_guard guard{dev};
        detail::backend_for(dev).memcpy_async(device + plan[c].offset, ring + (c % 3) * chunk, plan[c].bytes,
                                              dev.index(), s.view().handle());
      }
      paced.dma_enqueued(j, c % 3);
      const bool reused = c + 3 < plan.size();
      const event* read = paced.buffer_used(c % 3, s, reused);
      if (reused) j.open(c + 3, ring + (c % 3) * chunk, read);
    }
    return 0;
  });
  const auto out = read_device(s, device, bytes);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < bytes; ++i) wrong += out[i] != src[i] ? 1 : 0;
  EXPECT_EQ(wrong, 0U);
  s.synchronize();
  device_memory.deallocate(device, bytes, s);
  pinned.deallocate(ring, 3 * chunk, s);
}

}  // namespace
}  // namespace syncmem::test
