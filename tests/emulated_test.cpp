// ctest-labels: threaded
// What is particular to emulated devices: memory accounting, poisoning,
// pointer queries, range checks, cudaFree-like waiting, and the emulated
// virtual memory API.
#include "syncmem/emulated.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "backend/emulated/emulated_backend.hpp"
#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

detail::backend& emu() { return detail::emulated_backend(); }

TEST(Emulated, SynchronizingTheDeviceWhileStreamsComeAndGo) {
  // synchronize_device waits for streams that other threads may destroy
  // meanwhile: they must stay valid until it is done with them.
  std::atomic<bool> stop{false};
  std::thread syncer{[&] {
    while (!stop.load()) synchronize_device(device_id::emulated(2));
  }};
  std::vector<std::thread> owners;
  for (int t = 0; t < 3; ++t) {
    owners.emplace_back([] {
      for (int i = 0; i < 50; ++i) {
        stream s{device_id::emulated(2)};
        test::device_sleep(s, std::chrono::microseconds{100});
      }
    });
  }
  for (auto& o : owners) o.join();
  stop = true;
  syncer.join();
}

// Each thread has a current emulated device, as CUDA's runtime has a current
// GPU, and what CUDA runs on the current device is refused on another one: a
// missing device_guard fails here as it would on two GPUs. The faults these
// cases provoke on purpose are taken back from the count the test main checks.
class EmulatedCurrentDevice : public ::testing::Test {
 protected:
  void SetUp() override { faults_before_ = detail::emulated::current_device_faults.load(); }
  std::uint64_t provoked() {
    const auto n = detail::emulated::current_device_faults.load() - faults_before_;
    detail::emulated::current_device_faults.store(faults_before_);
    return n;
  }

 private:
  std::uint64_t faults_before_ = 0;
};

TEST_F(EmulatedCurrentDevice, AGuardMakesItsDeviceCurrentAndRestoresTheOneBefore) {
  ASSERT_EQ(emu().current_index(), 0);
  {
    const device_guard guard{device_id::emulated(2)};
    EXPECT_EQ(emu().current_index(), 2);
    EXPECT_EQ(current_device(), device_id::emulated(2));
    {
      const device_guard inner{device_id::emulated(1)};
      EXPECT_EQ(emu().current_index(), 1);
      EXPECT_EQ(current_device(), device_id::emulated(1));
    }
    EXPECT_EQ(emu().current_index(), 2);
  }
  EXPECT_EQ(emu().current_index(), 0);
  // Another thread starts at device 0, whatever this one has made current.
  set_current_device(device_id::emulated(1));
  EXPECT_EQ(current_device(), device_id::emulated(1));
  int elsewhere = -1;
  std::thread other{[&] { elsewhere = emu().current_index(); }};
  other.join();
  EXPECT_EQ(elsewhere, 0);
  set_current_device(device_id::emulated(0));
  EXPECT_EQ(provoked(), 0u);
}

TEST_F(EmulatedCurrentDevice, WhatRunsOnTheCurrentDeviceIsRefusedOnAnother) {
  const device_guard on_zero{device_id::emulated(0)};
  const int other = 1 + static_cast<int>(test::rng()() % 2);  // emulated:1 or emulated:2
  auto refused = [&](auto call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " on emulated:" << other << " ran with emulated:0 current";
    } catch (const logic_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));
      EXPECT_THAT(e.what(), HasSubstr(fmt::format("a device_guard for emulated:{} is missing", other)));
    }
  };
  refused([&] { (void)emu().allocate(other, 4096); }, "allocate (cudaMalloc)");
  refused([&] { (void)emu().memory(other); }, "memory (cudaMemGetInfo)");
  refused([&] { emu().synchronize_device(other); }, "synchronize_device");
  refused([&] { (void)emu().create_stream(other, false, 0); }, "create_stream");
  refused([&] { (void)emu().create_event(other, false, false); }, "create_event");
  refused([&] { emu().enable_peer_access(other, 0); }, "enable_peer_access");
  stream_handle const default_of_other = emu().default_stream(other);
  refused([&] { emu().synchronize_stream(other, default_of_other); }, "work on the default stream");
  EXPECT_EQ(provoked(), 7u);

  // A stream of its own names its device: work on it needs no guard (as cudaMemcpyAsync's).
  void* p = nullptr;
  stream_handle s{};
  {
    const device_guard guard{device_id::emulated(other)};
    p = emu().allocate(other, 4096);
    s = emu().create_stream(other, false, 0);
  }
  ASSERT_NE(p, nullptr);
  const auto bytes = test::random_bytes(4096);
  std::vector<std::uint8_t> back(4096);
  emu().memcpy_async(p, bytes.data(), bytes.size(), other, s);
  emu().memcpy_async(back.data(), p, back.size(), other, s);
  emu().synchronize_stream(other, s);
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(provoked(), 0u);

  // A free on the wrong device cannot throw: it is logged and counted, and still frees.
  const auto before = get_memory_info(device_id::emulated(other));
  emu().deallocate(other, p, 4096);
  EXPECT_EQ(provoked(), 1u);
  EXPECT_EQ(get_memory_info(device_id::emulated(other)).free, before.free + 4096);
  const device_guard guard{device_id::emulated(other)};
  emu().destroy_stream(other, s);
  EXPECT_EQ(provoked(), 0u);
}

// A process forked after the devices ran has none of their threads: its use
// of them is a clear error, not a wait forever (as CUDA refuses in a fork).
TEST(Emulated, AForkedChildIsRefusedClearly) {
  const device_id d = device_id::emulated(0);
  default_stream(d).synchronize();  // the devices have run in this process
  // Selected before the fork, so that the child's first call is to the emulated
  // backend: on a GPU machine the CUDA runtime would refuse the fork first.
  const device_guard guard{d};
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 3;
    try {
      stream s{d};
      code = 2;  // no error
    } catch (const logic_error& e) {
      code = std::strstr(e.what(), "forked after they were used") != nullptr ? 0 : 1;
    } catch (...) {
      code = 3;  // never back into gtest: the child would run the rest of the suite
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: another error, 2: no error, 3: another exception";
  default_stream(d).synchronize();  // the parent's devices are untouched
}

TEST(Emulated, AllocationsArePoisonedAndCounted) {
  const device_guard guard{device_id::emulated(1)};
  const auto before = get_memory_info(device_id::emulated(1));
  const std::size_t n = 1000 + test::rng()() % 1000;
  auto* p = static_cast<std::uint8_t*>(emu().allocate(1, n));
  ASSERT_NE(p, nullptr);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(p[i], 0xFF) << i;
  const auto during = get_memory_info(device_id::emulated(1));
  EXPECT_EQ(before.free - during.free, (n + 255) / 256 * 256);
  emu().deallocate(1, p, n);
  EXPECT_EQ(get_memory_info(device_id::emulated(1)).free, before.free);
}

TEST(Emulated, PoisoningCanBeTurnedOff) {
  set_emulated_poison(false);
  auto* p = static_cast<std::uint8_t*>(emu().allocate(0, 4096));
  set_emulated_poison(true);
  ASSERT_NE(p, nullptr);
  emu().deallocate(0, p, 4096);
  EXPECT_TRUE(emulated_device_options().poison);
}

TEST(Emulated, ExhaustionReturnsNullAndFreesAreRecounted) {
  const device_guard guard{device_id::emulated(2)};
  const auto info = get_memory_info(device_id::emulated(2));
  EXPECT_EQ(emu().allocate(2, info.total + 1), nullptr);
  void* big = emu().allocate(2, info.free);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(emu().allocate(2, 256), nullptr);
  emu().deallocate(2, big, info.free);
  void* small = emu().allocate(2, 256);
  EXPECT_NE(small, nullptr);
  emu().deallocate(2, small, 256);
}

TEST(Emulated, PointerAttributesKnowEveryAllocation) {
  const device_guard guard{device_id::emulated(1)};
  const std::size_t n = 5000;
  auto* d = static_cast<std::uint8_t*>(emu().allocate(1, n));
  auto* h = static_cast<std::uint8_t*>(emu().allocate_pinned(n, 0));
  std::vector<std::uint8_t> pageable(n);
  std::vector<std::uint8_t> registered(8192);
  emu().register_host(registered.data(), registered.size(), 0);

  auto a = get_pointer_attributes(d + 17);
  EXPECT_EQ(a.kind, memory_kind::device);
  EXPECT_EQ(a.device, device_id::emulated(1));
  EXPECT_EQ(a.base, d);
  EXPECT_GE(a.size, n);

  a = get_pointer_attributes(h + n - 1);
  EXPECT_EQ(a.kind, memory_kind::pinned_host);
  EXPECT_EQ(a.base, h);

  a = get_pointer_attributes(registered.data() + 100);
  EXPECT_EQ(a.kind, memory_kind::pinned_host);
  EXPECT_EQ(a.base, registered.data());
  EXPECT_EQ(a.size, registered.size());

  a = get_pointer_attributes(pageable.data());
  EXPECT_EQ(a.kind, memory_kind::pageable_host);
  EXPECT_FALSE(a.device.has_value());
  EXPECT_EQ(get_pointer_attributes(nullptr).kind, memory_kind::pageable_host);

  EXPECT_THROW(emu().register_host(registered.data() + 4096, 100, 0), logic_error);
  emu().unregister_host(registered.data());
  EXPECT_EQ(get_pointer_attributes(registered.data()).kind, memory_kind::pageable_host);
  emu().deallocate_pinned(h, n);
  emu().deallocate(1, d, n);
  EXPECT_EQ(get_pointer_attributes(d).kind, memory_kind::pageable_host);
}

TEST(Emulated, CopiesPastTheEndOfAnAllocationAreRefused) {
  auto* d = static_cast<std::uint8_t*>(emu().allocate(0, 1024));
  std::vector<std::uint8_t> host(4096);
  auto s = default_stream(device_id::emulated(0));
  try {
    emu().memcpy_async(host.data(), d + 512, 1024, 0, s.handle());
    FAIL() << "did not throw";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("runs past the end of its allocation"));
  }
  EXPECT_THROW(emu().memset_async(d + 1000, 0, 100, 0, s.handle()), logic_error);
  emu().deallocate(0, d, 1024);
}

TEST(Emulated, DeallocateWaitsForWorkInFlightLikeCudaFree) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  const std::size_t n = 1 << 16;
  const auto seed = test::fresh_seed();
  stream s{device_id::emulated(0)};
  auto* d = static_cast<std::uint8_t*>(emu().allocate(0, n));
  std::vector<std::uint8_t> host(n);
  test::stream_latch hold{s};
  test::device_fill_pattern(s, d, n, seed);
  emu().memcpy_async(host.data(), d, n, 0, s.view().handle());
  EXPECT_TRUE(test::while_held(hold, [&] {
    emu().deallocate(0, d, n);  // must not free before the copy ran
    return s.ready();
  }));
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], test::pattern_byte(seed, i));
}

TEST(Emulated, StreamOrderedFreeRunsAfterEarlierWork) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  const auto before = get_memory_info(device_id::emulated(0)).free;
  stream s{device_id::emulated(0)};
  auto& pools = *emu().pools();
  const auto pool = pools.create(0, 0, 0);  // keeps nothing cached, no cap: a free returns the memory
  void* d = pools.allocate(0, pool, 4096, s.view().handle());
  ASSERT_NE(d, nullptr);
  test::stream_latch hold{s};
  pools.deallocate(0, pool, d, s.view().handle());
  EXPECT_LT(get_memory_info(device_id::emulated(0)).free, before);
  hold.release();
  s.synchronize();
  EXPECT_EQ(get_memory_info(device_id::emulated(0)).free, before);
  pools.destroy(0, pool);
}

TEST(Emulated, VirtualMemoryMapsAndUnmapsPhysicalPages) {
  const std::size_t page = emu().virtual_memory()->granularity(0);
  ASSERT_GT(page, 0U);
  const auto before = get_memory_info(device_id::emulated(0)).free;
  auto* range = static_cast<std::uint8_t*>(emu().virtual_memory()->reserve(0, 4 * page));
  const auto h1 = emu().virtual_memory()->create(0, page);
  const auto h2 = emu().virtual_memory()->create(0, page);
  ASSERT_NE(h1, 0U);
  ASSERT_NE(h2, 0U);
  EXPECT_EQ(before - get_memory_info(device_id::emulated(0)).free, 2 * page);
  emu().virtual_memory()->map(0, range, page, h1);
  emu().virtual_memory()->map(0, range + 2 * page, page, h2);
  EXPECT_EQ(range[0], 0xFF);  // fresh pages are poisoned
  const auto seed = test::fresh_seed();
  for (std::size_t i = 0; i < page; i += 4093) range[i] = test::pattern_byte(seed, i);
  range[2 * page + 5] = 42;
  auto a = get_pointer_attributes(range + 3 * page);
  EXPECT_EQ(a.kind, memory_kind::device);
  EXPECT_EQ(a.device, device_id::emulated(0));
  EXPECT_EQ(a.size, 4 * page);
  // Remap the first physical block one page further: its contents move with it.
  emu().virtual_memory()->unmap(0, range, page);
  emu().virtual_memory()->map(0, range + page, page, h1);
  for (std::size_t i = 0; i < page; i += 4093) ASSERT_EQ(range[page + i], test::pattern_byte(seed, i));
  EXPECT_EQ(range[2 * page + 5], 42);
  emu().virtual_memory()->unmap(0, range + page, 2 * page);
  emu().virtual_memory()->release(0, h1, page);
  emu().virtual_memory()->release(0, h2, page);
  emu().virtual_memory()->free_address(0, range, 4 * page);
  EXPECT_EQ(get_memory_info(device_id::emulated(0)).free, before);
  EXPECT_THROW((void)emu().virtual_memory()->reserve(0, page + 1), logic_error);
}

TEST(Emulated, VirtualMemoryMapsPagesInOneCall) {
  const std::size_t page = emu().virtual_memory()->granularity(0);
  auto* range = static_cast<std::uint8_t*>(emu().virtual_memory()->reserve(0, 3 * page));
  const std::array<detail::physical_handle, 2> handles{emu().virtual_memory()->create(0, page),
                                                       emu().virtual_memory()->create(0, page)};
  emu().virtual_memory()->map_pages(0, range, page, handles.data(), handles.size());
  const auto seed = test::fresh_seed();
  for (std::size_t i = 0; i < 2 * page; i += 4093) range[i] = test::pattern_byte(seed, i);
  // The second handle holds the second page: mapped alone elsewhere, it shows it.
  emu().virtual_memory()->unmap(0, range, 2 * page);
  emu().virtual_memory()->map(0, range + 2 * page, page, handles[1]);
  for (std::size_t i = (page / 4093 + 1) * 4093; i < 2 * page; i += 4093) {
    ASSERT_EQ(range[page + i], test::pattern_byte(seed, i));  // byte i - page of the second page
  }
  emu().virtual_memory()->unmap(0, range + 2 * page, page);
  const std::array<detail::physical_handle, 2> bad{handles[0], detail::physical_handle{0}};
  EXPECT_THROW(emu().virtual_memory()->map_pages(0, range, page, bad.data(), bad.size()), logic_error);
  for (auto h : handles) emu().virtual_memory()->release(0, h, page);
  emu().virtual_memory()->free_address(0, range, 3 * page);
}

TEST(Emulated, VirtualMemoryCreateFailsWhenTheDeviceIsFull) {
  const std::size_t page = emu().virtual_memory()->granularity(2);
  const auto free = get_memory_info(device_id::emulated(2)).free;
  EXPECT_EQ(emu().virtual_memory()->create(2, (free / page + 1) * page), 0U);
}

TEST(Emulated, DelayIsAdjustable) {
  {
    test::scoped_emulated_delay delay{std::chrono::microseconds{1234}};
    EXPECT_EQ(emulated_device_options().max_delay, std::chrono::microseconds{1234});
  }
  EXPECT_EQ(emulated_device_options().max_delay, std::chrono::microseconds{0});
  EXPECT_THROW(set_emulated_delay(std::chrono::microseconds{-1}), logic_error);
}

}  // namespace
}  // namespace syncmem
