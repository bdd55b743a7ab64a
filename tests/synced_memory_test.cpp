// ctest-labels: threaded
// synced_memory: the behaviour the issue names, and each known defect of the
// seeds reproduced as a test that passes here.
#include "syncmem/synced_memory.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "core/deferred_release.hpp"
#include "device_ops.hpp"
#include "mr/default_host_resource.hpp"
#include "pattern.hpp"
#include "poisoning_resource.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/graph.hpp"
#include "syncmem/mr/failure_adaptor.hpp"
#include "syncmem/mr/pageable_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/statistics_adaptor.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {

void PrintTo(sync_state state, std::ostream* os) { *os << to_string(state); }

namespace {

using test::read_device;

std::vector<std::uint8_t> pattern(std::uint64_t seed, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = test::pattern_byte(seed, i);
  return out;
}

std::vector<std::uint8_t> host_bytes(synced_memory& m) {
  const auto* p = static_cast<const std::uint8_t*>(m.host_data());
  return {p, p + m.size()};
}

using test::while_held;

// Device memory lent to a buffer. Its keep-alive poisons the memory when it is
// let go (so that a late access by the library is seen as wrong bytes) and
// records that it was; the memory itself is freed with this object.
class lent_device_memory {
 public:
  lent_device_memory(device_id device, const std::vector<std::uint8_t>& contents)
      : device_{device}, bytes_{contents.size()} {
    device_guard guard{device};
    auto& backend = detail::backend_for(device);
    p_ = backend.allocate(device.index(), bytes_);
    backend.memcpy_async(p_, contents.data(), bytes_, device.index(), default_stream(device).handle());
    default_stream(device).synchronize();
  }
  ~lent_device_memory() {
    detail::drain_deferred_releases();
    device_guard guard{device_};
    detail::backend_for(device_).deallocate(device_.index(), p_, bytes_);
  }
  lent_device_memory(const lent_device_memory&) = delete;
  lent_device_memory& operator=(const lent_device_memory&) = delete;

  [[nodiscard]] void* get() const { return p_; }
  [[nodiscard]] bool released() const { return released_->load(); }
  [[nodiscard]] std::shared_ptr<void> keep_alive() {
    return std::shared_ptr<void>{p_, [device = device_, n = bytes_, released = released_](void* p) {
                                   device_guard guard{device};
                                   detail::backend_for(device).memset_async(p, 0xEE, n, device.index(),
                                                                            default_stream(device).handle());
                                   default_stream(device).synchronize();
                                   released->store(true);
                                 }};
  }
  [[nodiscard]] std::vector<std::uint8_t> contents() const { return read_device(default_stream(device_), p_, bytes_); }

 private:
  device_id device_;
  std::size_t bytes_;
  void* p_ = nullptr;
  std::shared_ptr<std::atomic<bool>> released_ = std::make_shared<std::atomic<bool>>(false);
};

template <class Kind>
class SyncedMemory : public test::device_test<Kind> {};
TYPED_TEST_SUITE(SyncedMemory, test::device_kinds, test::device_kind_names);

// ---- laziness, zero fill, state -------------------------------------------------

TYPED_TEST(SyncedMemory, AllocatesNothingUntilFirstUseThenZeroFillsOrNot) {
  // Resources that hand out 0xFF bytes: zeros then prove the fill, 0xFF proves its absence.
  test::poisoning_resource device{mr::get_per_device_resource(this->dev())};
  test::poisoning_resource host{mr::detail::default_host_resource(memory_kind::pinned_host, this->kind)};
  const std::size_t n = 1000 + test::rng()() % 5000;
  synced_memory m{n, this->dev(), {.label = "lazy", .device_resource = &device, .host_resource = &host}};
  EXPECT_EQ(m.state(), sync_state::uninitialized);
  EXPECT_FALSE(m.has_host_memory());
  EXPECT_FALSE(m.has_device_memory());
  EXPECT_EQ(m.size(), n);
  EXPECT_EQ(m.capacity(), n);
  const void* d = m.device_data();
  EXPECT_TRUE(m.has_device_memory());
  EXPECT_FALSE(m.has_host_memory());
  EXPECT_EQ(m.state(), sync_state::at_device);
  EXPECT_EQ(read_device(default_stream(this->dev()), d, n), std::vector<std::uint8_t>(n, 0));
  synced_memory h{n, this->dev(), {.device_resource = &device, .host_resource = &host}};
  EXPECT_EQ(host_bytes(h), std::vector<std::uint8_t>(n, 0));
  EXPECT_EQ(h.state(), sync_state::at_host);
  EXPECT_FALSE(h.has_device_memory());
  EXPECT_EQ(h.counters(), transfer_counters{});

  synced_memory raw_host{n, this->dev(), {.zero_fill = false, .device_resource = &device, .host_resource = &host}};
  EXPECT_EQ(host_bytes(raw_host), std::vector<std::uint8_t>(n, 0xFF));
  synced_memory raw_device{n, this->dev(), {.zero_fill = false, .device_resource = &device, .host_resource = &host}};
  EXPECT_EQ(read_device(default_stream(this->dev()), raw_device.device_data(), n), std::vector<std::uint8_t>(n, 0xFF));
}

TYPED_TEST(SyncedMemory, ReadsLeaveTheStateSyncedWritesMoveIt) {
  const std::size_t n = 777;
  const auto seed = test::fresh_seed();
  synced_memory m{n, this->dev()};
  std::memcpy(m.mutable_host_data(), pattern(seed, n).data(), n);
  EXPECT_EQ(m.state(), sync_state::at_host);
  const void* d = m.device_data();
  m.synchronize();
  EXPECT_EQ(m.state(), sync_state::synced);
  EXPECT_EQ(read_device(default_stream(this->dev()), d, n), pattern(seed, n));
  (void)m.mutable_device_data();
  EXPECT_EQ(m.state(), sync_state::at_device);
  EXPECT_EQ(host_bytes(m), pattern(seed, n));
  EXPECT_EQ(m.state(), sync_state::synced);
  EXPECT_EQ(m.counters().to_device_copies, 1U);
  EXPECT_EQ(m.counters().to_host_copies, 1U);
  EXPECT_EQ(m.counters().to_device_bytes, n);
  EXPECT_EQ(m.counters().to_host_bytes, n);
  EXPECT_EQ(to_string(sync_state::at_device), "at_device");
}

// ---- streams -------------------------------------------------------------------

TYPED_TEST(SyncedMemory, HostAccessAfterAnAsyncDeviceWriteWaitsForIt) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  test::scoped_emulated_delay delay{std::chrono::microseconds{200}};
  const std::size_t n = 1 << 16;
  const auto seed = test::fresh_seed();
  stream s{this->dev()};
  synced_memory m{n, this->dev(), {.label = "activations"}};
  void* d = m.mutable_device_data(s);
  test::stream_latch hold{s};
  test::device_fill_pattern(s, d, n, seed);
  EXPECT_EQ(while_held(hold, [&] { return host_bytes(m); }), pattern(seed, n));  // no explicit synchronisation
  EXPECT_EQ(m.state(), sync_state::synced);
}

TYPED_TEST(SyncedMemory, DeviceAccessOnAnotherStreamIsOrderedAfterTheLast) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  test::scoped_emulated_delay delay{std::chrono::microseconds{200}};
  const std::size_t n = 1 << 15;
  const auto seed = test::fresh_seed();
  stream a{this->dev()};
  stream b{this->dev()};
  synced_memory m{n, this->dev()};
  void* d = m.mutable_device_data(a);
  test::stream_latch hold{a};
  test::device_fill_pattern(a, d, n, seed);
  const void* on_b = m.device_data(b);  // b waits on a's work, the host does not (a is held)
  EXPECT_EQ(on_b, d);
  EXPECT_EQ(while_held(hold, [&] { return read_device(b, on_b, n); }), pattern(seed, n));
  // And a write on b then a read on a: a waits for b.
  test::device_sleep(b, std::chrono::milliseconds{30});
  test::device_add_bytes(b, m.mutable_device_data(b), n, 7);
  auto expected = pattern(seed, n);
  for (auto& byte : expected) byte = static_cast<std::uint8_t>(byte + 7);
  EXPECT_EQ(read_device(a, m.device_data(a), n), expected);
}

TYPED_TEST(SyncedMemory, PrefetchesDoNotBlockAndAreNeverClaimedSyncedEarly) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  test::scoped_emulated_delay delay{std::chrono::microseconds{100}};
  const std::size_t n = 1 << 14;
  const auto seed = test::fresh_seed();
  stream s{this->dev()};
  synced_memory m{n, this->dev()};
  std::memcpy(m.mutable_host_data(), pattern(seed, n).data(), n);
  {
    test::stream_latch hold{s};
    m.prefetch_to_device(s);
    EXPECT_FALSE(m.ready());
    EXPECT_EQ(m.state(), sync_state::at_host);  // not synced while the copy is held back
  }
  m.synchronize();
  EXPECT_TRUE(m.ready());
  EXPECT_EQ(m.state(), sync_state::synced);

  test::device_add_bytes(s, m.mutable_device_data(s), n, 1);
  {
    test::stream_latch hold{s};
    m.prefetch_to_host(s);
    EXPECT_FALSE(m.ready());
    EXPECT_EQ(m.state(), sync_state::at_device);
  }
  auto expected = pattern(seed, n);
  for (auto& byte : expected) byte = static_cast<std::uint8_t>(byte + 1);
  EXPECT_EQ(host_bytes(m), expected);  // waits for the prefetch, copies nothing more
  EXPECT_EQ(m.state(), sync_state::synced);
  EXPECT_EQ(m.counters().to_host_copies, 1U);
  EXPECT_EQ(m.counters().to_device_copies, 1U);
}

// A device access returns a pointer that is up to date in order on its stream:
// the state says synced at once, though the upload may still be queued (and a
// host write waits for it).
TYPED_TEST(SyncedMemory, ADeviceAccessIsSyncedInStreamOrderAtOnce) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  test::scoped_emulated_delay delay{std::chrono::microseconds{100}};
  const std::size_t n = 65'536;  // above the uploads that read the host side at once (tested below)
  const auto seed = test::fresh_seed();
  stream s{this->dev()};
  synced_memory m{n, this->dev()};
  std::memcpy(m.mutable_host_data(), pattern(seed, n).data(), n);
  test::stream_latch hold{s};
  const void* d = m.device_data(s);
  EXPECT_EQ(m.state(), sync_state::synced);
  EXPECT_FALSE(m.ready());                                              // the upload is held back
  while_held(hold, [&] { std::memset(m.mutable_host_data(), 0, n); });  // waits for the upload
  EXPECT_EQ(read_device(s, d, n), pattern(seed, n));
}

// A prefetch alone is not claimed synced before its copy completes; a device
// access after it is: its pointer is up to date in order on its stream.
TYPED_TEST(SyncedMemory, ADeviceAccessAfterAPrefetchIsSyncedAtOnce) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  const std::size_t n = 4096 + test::rng()() % 4096;
  const auto seed = test::fresh_seed();
  stream s{this->dev()};
  synced_memory m{n, this->dev()};
  std::memcpy(m.mutable_host_data(), pattern(seed, n).data(), n);
  test::stream_latch hold{s};
  m.prefetch_to_device(s);
  EXPECT_EQ(m.state(), sync_state::at_host);
  const void* d = m.device_data(s);
  EXPECT_EQ(m.state(), sync_state::synced);
  EXPECT_FALSE(m.ready());
  hold.release();
  EXPECT_EQ(read_device(s, d, n), pattern(seed, n));
  EXPECT_EQ(m.counters().to_device_copies, 1U);
}

// The state may be asked from several threads at once while copies complete
// (the TSan build checks that this is race-free).
TYPED_TEST(SyncedMemory, StateMayBeAskedFromManyThreadsWhileCopiesComplete) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  const std::size_t n = 1 << 16;
  stream s{this->dev()};
  synced_memory m{n, this->dev()};
  std::memcpy(m.mutable_host_data(), test::random_bytes(n).data(), n);
  for (int round = 0; round < 4; ++round) {
    test::stream_latch hold{s};
    if (round % 2 == 0) {
      (void)m.mutable_host_data();
      m.prefetch_to_device(s);
    } else {
      (void)m.mutable_device_data(s);
      m.prefetch_to_host(s);
    }
    const sync_state before = m.state();
    std::atomic<int> saw_synced{0};
    std::vector<std::thread> askers;
    for (int t = 0; t < 4; ++t) {
      askers.emplace_back([&] {
        for (;;) {
          const sync_state now = m.state();
          (void)m.ready();
          (void)m.size();
          if (now == sync_state::synced) break;
          EXPECT_EQ(now, before);
        }
        ++saw_synced;
      });
    }
    hold.release();
    for (auto& t : askers) t.join();
    EXPECT_EQ(saw_synced.load(), 4);
    EXPECT_TRUE(m.ready());
  }
}

TYPED_TEST(SyncedMemory, AStreamDestroyedAfterUseIsNotUsedAgain) {
  const std::size_t n = 4096;
  const auto seed = test::fresh_seed();
  synced_memory m{n, this->dev()};
  {
    stream s{this->dev()};
    void* d = m.mutable_device_data(s);
    test::device_sleep(s, std::chrono::milliseconds{20});
    test::device_fill_pattern(s, d, n, seed);
  }  // the stream is gone; its work finished first
  EXPECT_EQ(host_bytes(m), pattern(seed, n));
  stream other{this->dev()};
  EXPECT_EQ(read_device(other, m.device_data(other), n), pattern(seed, n));
}

// A stream that gets the handle of a destroyed stream is a different stream:
// the buffer orders host reads, and reads on a third stream, after its work.
TYPED_TEST(SyncedMemory, AStreamWithADestroyedStreamsHandleIsOrdered) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  const std::size_t n = 1 << 14;
  for (int reader = 0; reader < 2; ++reader) {
    const auto seed = test::fresh_seed();
    synced_memory m{n, this->dev(), {.label = "reused-handle"}};
    stream_handle dead{};
    {
      stream a{this->dev()};
      (void)m.mutable_device_data(a);
      dead = a.view().handle();
    }
    stream b{this->dev()};  // on emulated devices it usually gets a's handle
    if (b.view().handle() == dead) ::testing::Test::RecordProperty("handle_reused", "yes");
    void* d = m.mutable_device_data(b);
    test::stream_latch hold{b};
    test::device_fill_pattern(b, d, n, seed);
    if (reader == 0) {
      EXPECT_EQ(while_held(hold, [&] { return host_bytes(m); }), pattern(seed, n));
    } else {
      stream c{this->dev()};
      EXPECT_EQ(while_held(hold, [&] { return read_device(c, m.device_data(c), n); }), pattern(seed, n));
    }
  }
}

// Borrowed memory is let go only after the work the library enqueued on it:
// the copy out of it when growing past it, a clone's copy, a zero fill.
TYPED_TEST(SyncedMemory, BorrowedMemoryIsLetGoOnlyAfterTheWorkQueuedOnIt) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  const std::size_t n = 4096 + test::rng()() % 4096;
  const auto seed = test::fresh_seed();
  stream s{this->dev()};
  {  // growing past it with move_to_owned
    lent_device_memory lent{this->dev(), pattern(seed, n)};
    synced_memory m{0, this->dev(), {.label = "grow", .on_borrowed_growth = borrow_policy::move_to_owned}};
    m.borrow_device(lent.get(), n, lent.keep_alive());
    (void)m.device_data(s);
    {
      test::stream_latch hold{s};
      m.resize(2 * n);  // the copy out of the borrowed memory waits behind the latch
      EXPECT_FALSE(m.device_borrowed());
      EXPECT_FALSE(lent.released()) << "let go while the copy out of it was still queued";
    }
    auto expected = pattern(seed, n);
    expected.resize(2 * n, 0);
    EXPECT_EQ(host_bytes(m), expected);
    detail::drain_deferred_releases();
    EXPECT_TRUE(lent.released());
  }
  {  // a clone's copy out of it, the source destroyed at once
    lent_device_memory lent{this->dev(), pattern(seed, n)};
    std::optional<synced_memory> source{std::in_place, 0, this->dev(), synced_memory_options{.label = "source"}};
    source->borrow_device(lent.get(), n, lent.keep_alive());
    (void)source->device_data(s);
    std::optional<synced_memory> copy;
    {
      test::stream_latch hold{s};
      copy.emplace(source->clone());
      source.reset();
      EXPECT_FALSE(lent.released()) << "let go while the clone's copy was still queued";
    }
    EXPECT_EQ(host_bytes(*copy), pattern(seed, n));
    detail::drain_deferred_releases();
    EXPECT_TRUE(lent.released());
  }
  {  // a zero fill into it, the buffer destroyed at once
    lent_device_memory lent{this->dev(), pattern(seed, n)};
    std::optional<synced_memory> m{std::in_place, 0, this->dev(), synced_memory_options{.label = "fill"}};
    m->borrow_device(lent.get(), n, lent.keep_alive());
    m->resize(n / 2);
    (void)m->device_data(s);
    {
      test::stream_latch hold{s};
      m->resize(n);  // zero-fills the tail in order on s
      m.reset();
      EXPECT_FALSE(lent.released()) << "let go while the zero fill into it was still queued";
    }
    detail::drain_deferred_releases();
    ASSERT_TRUE(lent.released());
    EXPECT_EQ(lent.contents(), std::vector<std::uint8_t>(n, 0xEE)) << "the library wrote after letting go";
  }
}

TYPED_TEST(SyncedMemory, AStreamOfAnotherDeviceIsAClearError) {
  SYNCMEM_REQUIRE_COUNT(2);
  synced_memory m{64, this->dev(0), {.label = "weights"}};
  stream other{this->dev(1)};
  try {
    (void)m.device_data(other);
    FAIL() << "did not throw";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'weights'"));
    EXPECT_THAT(e.what(), HasSubstr(to_string(this->dev(0))));
    EXPECT_THAT(e.what(), HasSubstr(to_string(this->dev(1))));
  }
  EXPECT_THROW(m.prefetch_to_host(other), logic_error);
  EXPECT_EQ(m.state(), sync_state::uninitialized);
}

TEST(SyncedMemoryMixedKinds, AStreamOfAnEmulatedDeviceForACudaBufferIsRefused) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 1);
  synced_memory m{64, device_id::cuda(0)};
  EXPECT_THROW((void)m.device_data(default_stream(device_id::emulated(0))), logic_error);
}

TYPED_TEST(SyncedMemory, OperationsRestoreTheCurrentDevice) {
  SYNCMEM_REQUIRE_COUNT(2);
  std::thread{[this] {
    set_current_device(this->dev(1));
    synced_memory m{256, this->dev(0)};
    (void)m.mutable_host_data();
    (void)m.device_data();
    EXPECT_EQ(current_device(), this->dev(1));
    m.resize(1 << 20);
    EXPECT_EQ(current_device(), this->dev(1));
  }}.join();
}

// ---- capacity ------------------------------------------------------------------

TYPED_TEST(SyncedMemory, ResizeIsGrowOnlyAndKeepsTheNewestSide) {
  const auto seed = test::fresh_seed();
  synced_memory m{1000, this->dev()};
  std::memcpy(m.mutable_host_data(), pattern(seed, 1000).data(), 1000);
  m.resize(400);
  m.resize(1000);  // within capacity: no reallocation, the tail reads as zeros
  EXPECT_EQ(m.reallocations(), 0U);
  auto expected = pattern(seed, 1000);
  std::fill(expected.begin() + 400, expected.end(), 0);
  EXPECT_EQ(host_bytes(m), expected);
  // Grow past capacity from the device side: one device copy, no host copies.
  (void)m.mutable_device_data();
  m.resize(5000);
  EXPECT_EQ(m.reallocations(), 1U);
  EXPECT_EQ(m.capacity(), 5000U);
  EXPECT_EQ(m.state(), sync_state::at_device);
  EXPECT_EQ(m.counters().device_copies, 1U);
  expected.resize(5000, 0);
  EXPECT_EQ(read_device(default_stream(this->dev()), m.device_data(), 5000), expected);
  m.resize(3000, resize_mode::discard);
  EXPECT_EQ(m.state(), sync_state::uninitialized);
  EXPECT_EQ(host_bytes(m), std::vector<std::uint8_t>(3000, 0));
  EXPECT_EQ(m.reallocations(), 1U);
}

TYPED_TEST(SyncedMemory, SizeOverflowIsRefusedAndChangesNothing) {
  EXPECT_THROW((synced_memory{synced_memory::max_size() + 1, this->dev()}), logic_error);
  synced_memory m{16, this->dev()};
  (void)m.mutable_host_data();
  try {
    m.resize(~std::size_t{0});
    FAIL() << "did not throw";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("exceeds the maximum"));
  }
  EXPECT_EQ(m.size(), 16U);
  EXPECT_EQ(m.state(), sync_state::at_host);
}

TYPED_TEST(SyncedMemory, OutOfMemoryNamesTheLabelAndChangesNothing) {
  synced_memory m{64, this->dev(), {.label = "too big"}};
  (void)m.mutable_device_data();
  const auto total = get_memory_info(this->dev()).total;
  try {
    m.resize(total * 2);
    FAIL() << "did not throw";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.info().label, "too big");
    EXPECT_EQ(e.info().device, this->dev());
  }
  EXPECT_EQ(m.size(), 64U);
  EXPECT_EQ(m.state(), sync_state::at_device);
}

// ---- borrowing -------------------------------------------------------------------

TYPED_TEST(SyncedMemory, BorrowedHostMemoryIsUsedInPlaceAndKeptAlive) {
  const std::size_t n = 3000;
  const auto seed = test::fresh_seed();
  auto external = std::make_shared<std::vector<std::uint8_t>>(pattern(seed, n));
  synced_memory m{10, this->dev()};
  m.borrow_host(external->data(), n, external);
  EXPECT_EQ(external.use_count(), 2);
  EXPECT_TRUE(m.host_borrowed());
  EXPECT_EQ(m.size(), n);
  EXPECT_EQ(m.state(), sync_state::at_host);
  EXPECT_EQ(m.host_data(), external->data());
  EXPECT_EQ(read_device(default_stream(this->dev()), m.device_data(), n), pattern(seed, n));
  test::device_add_bytes(default_stream(this->dev()), m.mutable_device_data(), n, 3);
  (void)m.host_data();
  EXPECT_EQ((*external)[5], static_cast<std::uint8_t>(test::pattern_byte(seed, 5) + 3));  // written in place
}

TYPED_TEST(SyncedMemory, GrowingPastBorrowedMemoryThrowsOrMovesWithoutLeaking) {
  const std::size_t n = 512;
  const auto seed = test::fresh_seed();
  std::atomic<int> released{0};
  {
    auto* raw = new std::vector<std::uint8_t>(pattern(seed, n));
    std::shared_ptr<void> keep{raw, [&released](void* p) {
                                 delete static_cast<std::vector<std::uint8_t>*>(p);
                                 ++released;
                               }};
    synced_memory strict{0, this->dev(), {.label = "strict"}};
    strict.borrow_host(raw->data(), n, keep);
    try {
      strict.resize(n * 4);
      FAIL() << "did not throw";
    } catch (const logic_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("'strict'"));
      EXPECT_THAT(e.what(), HasSubstr("borrowed host memory of 512 bytes"));
    }
    EXPECT_EQ(strict.size(), n);
    EXPECT_TRUE(strict.host_borrowed());
    EXPECT_EQ(host_bytes(strict), pattern(seed, n));
  }
  detail::drain_deferred_releases();  // let go in stream order, after the work queued on it
  EXPECT_EQ(released.load(), 1);

  mr::pageable_resource pageable;
  mr::statistics_adaptor host{pageable};  // counts what the buffer holds of it
  {
    auto* raw = new std::vector<std::uint8_t>(pattern(seed, n));
    std::shared_ptr<void> keep{raw, [&released](void* p) {
                                 delete static_cast<std::vector<std::uint8_t>*>(p);
                                 ++released;
                               }};
    synced_memory owned{
        0, this->dev(), {.label = "owned", .on_borrowed_growth = borrow_policy::move_to_owned, .host_resource = &host}};
    owned.borrow_host(raw->data(), n, std::move(keep));
    owned.resize(n * 4);
    detail::drain_deferred_releases();
    EXPECT_EQ(released.load(), 2);  // MixMemory leaked here; we let go of the borrowed memory
    EXPECT_FALSE(owned.host_borrowed());
    EXPECT_EQ(host.statistics().allocations.current, 1);
    auto expected = pattern(seed, n);
    expected.resize(n * 4, 0);
    EXPECT_EQ(host_bytes(owned), expected);
  }
  EXPECT_EQ(host.statistics().allocations.current, 0);
}

TYPED_TEST(SyncedMemory, BorrowedDeviceMemoryMustBelongToTheBuffersDevice) {
  const std::size_t n = 2048;
  const auto seed = test::fresh_seed();
  device_guard guard{this->dev()};
  auto& backend = detail::backend_for(this->dev());
  void* external = backend.allocate(this->dev().index(), n);
  auto s = default_stream(this->dev());
  test::device_fill_pattern(s, external, n, seed);
  s.synchronize();
  {
    synced_memory m{0, this->dev()};
    m.borrow_device(external, n);
    EXPECT_TRUE(m.device_borrowed());
    EXPECT_EQ(m.state(), sync_state::at_device);
    EXPECT_EQ(host_bytes(m), pattern(seed, n));
    EXPECT_THROW(m.borrow_device(external, n * 2), logic_error);  // past the end of its allocation
    std::vector<std::uint8_t> host(16);
    EXPECT_THROW(m.borrow_device(host.data(), 16), logic_error);  // host memory
  }
  if (this->count() >= 2) {
    synced_memory elsewhere{0, this->dev(1)};
    try {
      elsewhere.borrow_device(external, n);
      FAIL() << "did not throw";
    } catch (const logic_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(to_string(this->dev(0))));
    }
  }
  backend.deallocate(this->dev().index(), external, n);
}

// ---- the seeds' defects ---------------------------------------------------------

// Caffe marks an async push SYNCED at once; a host write right after it races
// with the copy. Here the write waits: the device receives exactly the old
// contents, and the new contents go up with the next device access.
TYPED_TEST(SyncedMemory, CaffeHostWriteRightAfterAsyncPushDoesNotRace) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  test::scoped_emulated_delay delay{std::chrono::microseconds{100}};
  const std::size_t n = 1 << 16;
  const auto old_seed = test::fresh_seed();
  const auto new_seed = test::fresh_seed();
  stream s{this->dev()};
  synced_memory m{n, this->dev()};
  std::memcpy(m.mutable_host_data(), pattern(old_seed, n).data(), n);
  test::stream_latch hold{s};
  m.prefetch_to_device(s);  // async_gpu_push
  EXPECT_NE(m.state(), sync_state::synced);
  // What the push delivered, captured in stream order right behind it.
  device_guard guard{this->dev()};
  auto& backend = detail::backend_for(this->dev());
  void* snapshot = backend.allocate(this->dev().index(), n);
  backend.memcpy_async(snapshot, m.device_data(s), n, this->dev().index(), s.view().handle());
  while_held(hold, [&] { std::memcpy(m.mutable_host_data(), pattern(new_seed, n).data(), n); });  // waits for the push
  EXPECT_EQ(read_device(s, snapshot, n), pattern(old_seed, n));
  EXPECT_EQ(read_device(s, m.device_data(s), n), pattern(new_seed, n));
  backend.deallocate(this->dev().index(), snapshot, n);
}

// A device access's upload of at most 4 KiB has read the host side when it
// returns (CUDA, without ATS): a host write right after waits for nothing
// queued on the stream. A larger upload, and every upload on an emulated
// device, is waited for first. Either way the device gets the bytes of the access, and the
// write's bytes reach the device at the next access.
TYPED_TEST(SyncedMemory, AHostWriteAfterASmallDeviceAccessWaitsForNothingQueued) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  test::scoped_emulated_delay delay{std::chrono::microseconds{50}};
  for (const std::size_t n : {std::size_t{1}, std::size_t{4}, std::size_t{1'000}, std::size_t{4'095},
                              std::size_t{4'096}, std::size_t{4'097}, std::size_t{65'536}}) {
    SCOPED_TRACE(n);
    const bool read_at_return =
        n <= 4'096 && detail::backend_for(this->dev()).pageable_uploads_read_at_return(this->dev().index());
    const auto old_bytes = test::random_bytes(n);
    const auto new_bytes = test::random_bytes(n);
    stream s{this->dev()};
    synced_memory m{n, this->dev()};
    std::memcpy(m.mutable_host_data(), old_bytes.data(), n);
    test::stream_latch hold{s};
    const void* d = m.device_data(s);
    // What the upload delivered, captured in stream order right behind it.
    device_guard guard{this->dev()};
    auto& backend = detail::backend_for(this->dev());
    void* snapshot = backend.allocate(this->dev().index(), n);
    backend.memcpy_async(snapshot, d, n, this->dev().index(), s.view().handle());
    EXPECT_EQ(m.ready(), read_at_return) << "whether a copy still reads the host side";
    std::atomic<bool> released{false};
    auto writer = std::async(std::launch::async, [&] {
      std::memcpy(m.mutable_host_data(), new_bytes.data(), n);
      return !released.load();
    });
    if (read_at_return) (void)writer.wait_for(std::chrono::seconds{20});
    released = true;
    hold.release();
    EXPECT_EQ(writer.get(), read_at_return) << "whether the write returned while the stream was held";
    EXPECT_EQ(read_device(s, snapshot, n), old_bytes);
    EXPECT_EQ(m.state(), sync_state::at_host);
    EXPECT_EQ(read_device(s, m.device_data(s), n), new_bytes);
    EXPECT_EQ(host_bytes(m), new_bytes);
    backend.deallocate(this->dev().index(), snapshot, n);
  }
}

// MixMemory has no "both valid" state and copies on every switch of side.
TYPED_TEST(SyncedMemory, MixMemorySwitchingSidesWhenBothAreValidCopiesNothing) {
  synced_memory m{4096, this->dev()};
  (void)m.mutable_host_data();
  for (int i = 0; i < 100; ++i) {
    (void)m.device_data();
    (void)m.host_data();
  }
  EXPECT_EQ(m.counters().to_device_copies, 1U);
  EXPECT_EQ(m.counters().to_host_copies, 0U);
  EXPECT_EQ(m.state(), sync_state::synced);
}

TYPED_TEST(SyncedMemory, AccessAfterMoveIsAClearError) {
  synced_memory a{128, this->dev(), {.label = "moved"}};
  (void)a.mutable_host_data();
  synced_memory b = std::move(a);
  EXPECT_EQ(b.state(), sync_state::at_host);
  EXPECT_EQ(b.label(), "moved");
  try {
    (void)a.host_data();  // NOLINT(bugprone-use-after-move)
    FAIL() << "did not throw";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("moved-from synced_memory 'moved'"));
  }
  EXPECT_THROW((void)a.device_data(), logic_error);          // NOLINT(bugprone-use-after-move)
  EXPECT_THROW((void)a.mutable_device_data(), logic_error);  // NOLINT(bugprone-use-after-move)
  EXPECT_THROW(a.resize(10), logic_error);                   // NOLINT(bugprone-use-after-move)
  EXPECT_THROW((void)a.clone(), logic_error);                // NOLINT(bugprone-use-after-move)
  a = std::move(b);                                          // a moved-from buffer can be assigned to again
  EXPECT_EQ(a.size(), 128U);
}

TYPED_TEST(SyncedMemory, CloneIsDeepAndIndependent) {
  const std::size_t n = 999;
  const auto seed = test::fresh_seed();
  synced_memory m{n, this->dev(), {.label = "original"}};
  test::device_fill_pattern(default_stream(this->dev()), m.mutable_device_data(), n, seed);
  auto c = m.clone();
  EXPECT_EQ(c.label(), "original");
  EXPECT_EQ(c.state(), sync_state::at_device);
  EXPECT_NE(c.device_data(), m.device_data());
  test::device_add_bytes(default_stream(this->dev()), c.mutable_device_data(), n, 1);
  EXPECT_EQ(host_bytes(m), pattern(seed, n));
  auto expected = pattern(seed, n);
  for (auto& b : expected) b = static_cast<std::uint8_t>(b + 1);
  EXPECT_EQ(host_bytes(c), expected);
}

// An empty buffer holds no contents: it is uninitialized whatever is asked of
// it, and every accessor gives null, also after a resize to 0 (which keeps the
// memory for later growth) and after borrowing 0 bytes.
TYPED_TEST(SyncedMemory, EmptyBuffersAreUninitializedAndGiveNull) {
  auto expect_empty = [](synced_memory& m) {
    const auto before = m.counters();
    EXPECT_EQ(m.host_data(), nullptr);
    EXPECT_EQ(m.state(), sync_state::uninitialized);
    EXPECT_EQ(m.mutable_host_data(), nullptr);
    EXPECT_EQ(m.state(), sync_state::uninitialized);
    EXPECT_EQ(m.device_data(), nullptr);
    EXPECT_EQ(m.mutable_device_data(), nullptr);
    m.prefetch_to_device();
    m.prefetch_to_host();
    EXPECT_EQ(m.state(), sync_state::uninitialized);
    EXPECT_EQ(m.counters(), before);
  };
  synced_memory m{0, this->dev()};
  expect_empty(m);
  m.resize(100);
  EXPECT_EQ(host_bytes(m), std::vector<std::uint8_t>(100, 0));

  const std::size_t n = 1 + test::rng()() % 5000;
  const auto bytes = test::random_bytes(n);
  synced_memory shrunk{n, this->dev()};
  std::memcpy(shrunk.mutable_host_data(), bytes.data(), n);
  (void)shrunk.device_data();
  shrunk.resize(0);
  expect_empty(shrunk);
  EXPECT_EQ(shrunk.capacity(), n);
  shrunk.resize(n);  // the contents went with the size: the tail reads as zeros
  EXPECT_EQ(host_bytes(shrunk), std::vector<std::uint8_t>(n, 0));
  EXPECT_EQ(shrunk.counters().to_device_copies, 1U);

  synced_memory borrowed{16, this->dev()};
  (void)borrowed.mutable_host_data();
  std::vector<std::uint8_t> nothing(8);
  borrowed.borrow_host(nothing.data(), 0);
  expect_empty(borrowed);
  synced_memory d{};
  EXPECT_TRUE(d.empty());
}

TEST(SyncedMemoryOptions, ResourcesMustFitTheBuffer) {
  mr::pageable_resource host;
  EXPECT_THROW((synced_memory{16, device_id::emulated(0), {.device_resource = &host}}), logic_error);
  synced_memory pageable{16, device_id::emulated(0), {.host_kind = host_memory_kind::pageable}};
  EXPECT_EQ(pageable.host_memory(), memory_kind::pageable_host);
  (void)pageable.host_data();
  EXPECT_EQ(get_pointer_attributes(pageable.host_data()).kind, memory_kind::pageable_host);
  synced_memory pinned{16, device_id::emulated(0)};
  EXPECT_EQ(get_pointer_attributes(pinned.host_data()).kind, memory_kind::pinned_host);
}

// ---- typed access (spans) ------------------------------------------------------------

TYPED_TEST(SyncedMemory, SpansCountElementsAndSyncLikeTheAccessors) {
  const std::size_t n = 1000 + test::rng()() % 1000;
  synced_memory m{n * sizeof(std::uint32_t), this->dev(), {.label = "spans"}};
  std::vector<std::uint32_t> values(n);
  for (auto& v : values) v = static_cast<std::uint32_t>(test::rng()());
  std::span<std::uint32_t> h = m.mutable_host_span<std::uint32_t>();
  ASSERT_EQ(h.size(), n);
  std::copy(values.begin(), values.end(), h.begin());
  EXPECT_EQ(m.state(), sync_state::at_host);
  stream s{this->dev()};
  std::span<const std::uint32_t> d = m.device_span<std::uint32_t>(s);
  ASSERT_EQ(d.size(), n);
  const auto on_device = read_device(s, d.data(), d.size_bytes());
  EXPECT_EQ(std::memcmp(on_device.data(), values.data(), d.size_bytes()), 0);
  EXPECT_EQ(m.state(), sync_state::synced);
  // The device rewrites every byte; the host span sees them all.
  std::span<std::uint8_t> w = m.mutable_device_span<std::uint8_t>(s);
  ASSERT_EQ(w.size(), n * sizeof(std::uint32_t));
  const auto seed = test::fresh_seed();
  test::device_fill_pattern(s, w.data(), w.size(), seed);
  EXPECT_EQ(m.state(), sync_state::at_device);
  std::span<const std::uint8_t> back = m.host_span<std::uint8_t>();
  ASSERT_EQ(back.size(), w.size());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < back.size(); ++i) wrong += back[i] == test::pattern_byte(seed, i) ? 0 : 1;
  EXPECT_EQ(wrong, 0U);
}

TYPED_TEST(SyncedMemory, SpansRefuseASizeThatIsNotAWholeNumberOfElements) {
  synced_memory m{10, this->dev(), {.label = "odd"}};
  try {
    (void)m.host_span<std::uint64_t>();
    FAIL() << "a span of 10 bytes as 8-byte elements";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("synced_memory 'odd'"));
    EXPECT_THAT(e.what(), HasSubstr("host_span<T>: its size of 10 bytes is not a multiple of sizeof(T) = 8"));
  }
  stream s{this->dev()};
  EXPECT_THROW((void)m.mutable_device_span<std::uint32_t>(s), logic_error);
  EXPECT_EQ(m.state(), sync_state::uninitialized);  // refused before any access
  EXPECT_FALSE(m.has_device_memory());
  EXPECT_EQ(m.host_span<std::uint16_t>().size(), 5U);
  synced_memory empty{0, this->dev()};
  EXPECT_TRUE(empty.host_span<double>().empty());
}

// ---- many buffers at once ----------------------------------------------------------------

// Buffers of odd sizes with pinned and pageable host sides, some listed twice,
// some empty, some already on the device: one batched prefetch brings every
// byte up, each state and counter as a prefetch of its own would leave them.
TYPED_TEST(SyncedMemory, BatchedPrefetchToDeviceAndBack) {
  const device_id d = this->dev();
  stream s{d};
  std::vector<std::unique_ptr<synced_memory>> owned;
  std::vector<std::vector<std::uint8_t>> contents;
  std::vector<synced_memory*> list;
  for (int i = 0; i < 40; ++i) {
    synced_memory_options o;
    o.host_kind = i % 3 == 0 ? host_memory_kind::pageable : host_memory_kind::pinned;
    const std::size_t n = i % 11 == 5 ? 0 : 1 + test::rng()() % 70000;
    owned.push_back(std::make_unique<synced_memory>(n, d, o));
    contents.push_back(test::random_bytes(n));
    if (n > 0) std::memcpy(owned.back()->mutable_host_data(), contents.back().data(), n);
    list.push_back(owned.back().get());
    if (i % 7 == 0) list.push_back(owned.back().get());  // twice: prefetched once
  }
  prefetch_to_device(list, s);
  for (std::size_t i = 0; i < owned.size(); ++i) {
    synced_memory& m = *owned[i];
    if (m.empty()) {
      EXPECT_EQ(m.state(), sync_state::uninitialized);
      continue;
    }
    EXPECT_EQ(m.counters().to_device_copies, 1U) << i;
    EXPECT_EQ(read_device(s, m.device_data(s), m.size()), contents[i]) << "buffer " << i;
    EXPECT_EQ(m.state(), sync_state::synced);
  }
  // The device writes each; one batched prefetch brings every byte down.
  for (std::size_t i = 0; i < owned.size(); ++i) {
    if (owned[i]->empty()) continue;
    test::device_add_bytes(s, owned[i]->mutable_device_data(s), owned[i]->size(), 3);
    for (auto& b : contents[i]) b = static_cast<std::uint8_t>(b + 3);
  }
  prefetch_to_host(list, s);
  synchronize(list);
  for (std::size_t i = 0; i < owned.size(); ++i) {
    if (owned[i]->empty()) continue;
    EXPECT_TRUE(owned[i]->ready());
    EXPECT_EQ(owned[i]->state(), sync_state::synced);
    EXPECT_EQ(host_bytes(*owned[i]), contents[i]) << "buffer " << i;
    EXPECT_EQ(owned[i]->counters().to_host_copies, 1U) << i;
  }
}

// A host write after a batched upload waits for that upload, which reads the
// host side.
TYPED_TEST(SyncedMemory, HostWriteWaitsForBatchedUpload) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  const device_id d = this->dev();
  stream s{d};
  synced_memory a{5000, d}, b{777, d};
  const auto ca = test::random_bytes(5000), cb = test::random_bytes(777);
  std::memcpy(a.mutable_host_data(), ca.data(), ca.size());
  std::memcpy(b.mutable_host_data(), cb.data(), cb.size());
  std::vector<synced_memory*> list{&a, &b};
  {
    test::stream_latch hold{s};
    prefetch_to_device(list, s);
    EXPECT_FALSE(a.ready());
    EXPECT_EQ(a.state(), sync_state::at_host);  // not claimed synced before the copy is done
    // b shares the batch's copy: done once the write has waited for it.
    const bool batch_done = while_held(hold, [&] {
      std::memset(a.mutable_host_data(), 0, 5000);
      return b.ready();
    });
    EXPECT_TRUE(batch_done) << "a host write did not wait for the batched upload reading its host side";
  }
  synced_memory* only_b[] = {&b};
  synchronize(only_b);
  EXPECT_EQ(read_device(s, b.device_data(s), 777), cb);
  EXPECT_EQ(a.state(), sync_state::at_host);
  (void)a.device_data(s);
  EXPECT_EQ(read_device(s, a.device_data(s), 5000), std::vector<std::uint8_t>(5000, 0));
}

// Device memory that runs out for one buffer of the batch: nothing is
// started and every state is as it was.
TYPED_TEST(SyncedMemory, BatchedPrefetchFailureChangesNoState) {
  const device_id d = this->dev();
  stream s{d};
  mr::failure_adaptor failing{mr::get_per_device_resource(d)};
  synced_memory_options o;
  o.device_resource = &failing;
  std::vector<std::unique_ptr<synced_memory>> owned;
  std::vector<synced_memory*> list;
  for (int i = 0; i < 6; ++i) {
    owned.push_back(std::make_unique<synced_memory>(1000 + i, d, o));
    std::memset(owned.back()->mutable_host_data(), i, 1000 + i);
    list.push_back(owned.back().get());
  }
  failing.set_predicate(mr::failure_adaptor::nth(4));
  EXPECT_THROW(prefetch_to_device(list, s), std::bad_alloc);
  for (const auto& m : owned) {
    EXPECT_EQ(m->state(), sync_state::at_host);
    EXPECT_EQ(m->counters().to_device_copies, 0U);
  }
  synced_memory* null_list[] = {owned[0].get(), nullptr};
  EXPECT_THAT(test::error_of([&] {
                prefetch_to_device(null_list, s);
                return 0;
              }),
              HasSubstr("buffer 1 of 2 is null"));
  failing.set_predicate({});
  prefetch_to_device(list, s);
  for (std::size_t i = 0; i < owned.size(); ++i) {
    EXPECT_EQ(read_device(s, owned[i]->device_data(s), 1000 + i),
              std::vector<std::uint8_t>(1000 + i, static_cast<std::uint8_t>(i)));
  }
}

// ---- stream capture ----------------------------------------------------------------

// Used on a capturing stream, a buffer records its transfers into the graph
// and takes the state the captured work leaves it in, as if the graph had
// run once; its pointers stay fixed, so that each launch uploads what is in
// the host side then, and downloads the result into it (docs/graphs.md).
TYPED_TEST(SyncedMemory, TransfersOnACapturingStreamAreRecordedAndReplayed) {
  test::scoped_emulated_delay delay{std::chrono::microseconds{20}};
  // 1,000 bytes: outside a capture, its upload would go through pageable
  // memory, which a graph cannot record.
  for (const std::size_t n : {std::size_t{1'000}, std::size_t{50'021}}) {
    SCOPED_TRACE(n);
    stream s{this->dev()};
    const auto delta = static_cast<std::uint8_t>(test::rng()() | 1u);
    synced_memory m{n, this->dev(), {.label = "captured"}};
    (void)m.mutable_device_data(s);  // the device side exists, and s is the buffer's stream
    auto* host = static_cast<std::uint8_t*>(m.mutable_host_data());
    ASSERT_EQ(m.state(), sync_state::at_host);
    const transfer_counters before = m.counters();

    graph_pool pool;
    begin_capture(s, pool);
    void* device = m.mutable_device_data(s);
    EXPECT_EQ(m.state(), sync_state::at_device);
    test::device_add_bytes(s, device, n, delta);
    EXPECT_EQ(m.host_data(), host);
    EXPECT_EQ(m.state(), sync_state::synced) << "the state the captured work leaves";
    graph step = end_capture(s);
    EXPECT_EQ(m.counters().to_device_copies, before.to_device_copies + 1);
    EXPECT_EQ(m.counters().to_host_copies, before.to_host_copies + 1);
    EXPECT_EQ(pool.reserved_bytes(), 0u) << "the buffer allocated nothing in the capture";

    for (int round = 0; round < 15; ++round) {
      const auto source = test::random_bytes(n);
      std::memcpy(host, source.data(), n);  // fresh inputs where the graph reads them
      step.launch(s);
      s.synchronize();
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(host[i], static_cast<std::uint8_t>(source[i] + delta)) << "launch " << round << ", byte " << i;
      }
      ASSERT_EQ(read_device(s, device, n), std::vector<std::uint8_t>(host, host + n)) << "launch " << round;
    }
    EXPECT_EQ(m.state(), sync_state::synced);
    EXPECT_EQ(m.device_data(s), device);
  }
}

// A buffer first used on a capturing stream takes its device side from the
// capture's pool; pageable host memory cannot take part in a capture and is
// refused by name, nothing recorded.
TYPED_TEST(SyncedMemory, AFirstUseInACaptureAllocatesFromTheGraphPoolAndPageableIsRefused) {
  stream s{this->dev()};
  const std::size_t n = 8'209;
  synced_memory fresh{n, this->dev(), {.label = "fresh"}};
  synced_memory pageable{n, this->dev(), {.label = "pageable", .host_kind = host_memory_kind::pageable}};
  (void)pageable.mutable_device_data(s);
  (void)pageable.mutable_host_data();
  graph_pool pool;
  begin_capture(s, pool);
  (void)fresh.mutable_device_data(s);
  EXPECT_GE(pool.reserved_bytes(), n);
  std::string message = "no error";
  try {
    (void)pageable.device_data(s);
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_THAT(message, HasSubstr("is being captured into a graph"));
  EXPECT_THAT(message, HasSubstr("from pageable memory"));
  graph g = end_capture(s);
  g.launch(s);
  s.synchronize();
}

}  // namespace
}  // namespace syncmem
