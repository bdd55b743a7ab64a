// ctest-labels: threaded
// Stress: many threads, each with several streams, doing random allocations
// from the device's default resource, copies through the transfer engine
// between every kind of memory, and synced_memory operations, for a bounded
// time, with every byte checked against what each thread knows it wrote.
//
// SYNCMEM_STRESS_SECONDS sets the time per device kind (default 3: CI; the GPU
// check runs longer). A watchdog gives the workers SYNCMEM_STRESS_WATCHDOG_SECONDS
// (default 120) past that to finish; if one has not, it prints what each worker
// was doing and aborts, so that a hang says where it is rather than timing out
// without a word.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/synced_memory.hpp"
#include "test_support.hpp"

namespace syncmem {
namespace {

double stress_seconds() {
  if (const char* text = std::getenv("SYNCMEM_STRESS_SECONDS")) return std::max(0.1, std::atof(text));
  return 3.0;
}

double watchdog_seconds() {
  if (const char* text = std::getenv("SYNCMEM_STRESS_WATCHDOG_SECONDS")) return std::max(1.0, std::atof(text));
  return 120.0;
}

// What a worker is doing, for the watchdog.
struct progress {
  std::atomic<const char*> step{"starting"};
  std::atomic<std::size_t> bytes{0};
  std::atomic<std::uint64_t> steps{0};
  std::atomic<bool> finished{false};
};

struct tally {
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> copies{0};
  std::atomic<std::uint64_t> synced_ops{0};
  std::atomic<std::uint64_t> bytes_checked{0};
};

class worker {
 public:
  worker(device_id device, std::uint64_t seed, tally& counts, progress& now)
      : device_{device}, random_{seed}, counts_{counts}, now_{now}, pinned_{staging_resource(device.kind())} {
    for (int i = 0; i < 3; ++i) streams_.emplace_back(device);
  }

  void run(std::chrono::steady_clock::time_point deadline) {
    while (std::chrono::steady_clock::now() < deadline) {
      now_.steps.fetch_add(1, std::memory_order_relaxed);
      switch (random_() % 4) {
        case 0:
          allocation_step();
          break;
        case 1:
          copy_step();
          break;
        default:
          synced_step();
          break;
      }
    }
    // Everything still held is checked once more and given back.
    at("final checks", 0);
    for (auto& b : blocks_) check_block(b);
    for (auto& b : blocks_) mr::get_per_device_resource(device_).deallocate(b.p, b.bytes, b.stream);
    blocks_.clear();
    for (auto& s : buffers_) check_synced(s);
    buffers_.clear();
  }

 private:
  struct block {
    void* p;
    std::size_t bytes;
    std::uint64_t seed;
    stream_view stream;
  };
  struct synced {
    std::unique_ptr<synced_memory> memory;
    std::vector<std::uint8_t> model;
  };

  stream_view pick_stream() { return streams_[random_() % streams_.size()].view(); }
  void at(const char* step, std::size_t bytes) {
    now_.bytes.store(bytes, std::memory_order_relaxed);
    now_.step.store(step, std::memory_order_relaxed);
  }
  std::size_t pick_size() { return 1 + random_() % (random_() % 8 == 0 ? (1 << 20) : 8192); }

  void fail(const std::string& what) { throw std::runtime_error{what + " on " + to_string(device_)}; }

  void check_block(const block& b) {
    std::vector<std::uint8_t> host(b.bytes);
    copy(host.data(), b.p, b.bytes, b.stream);
    for (std::size_t i = 0; i < b.bytes; ++i) {
      if (host[i] != test::pattern_byte(b.seed, i)) fail("a device block was corrupted at byte " + std::to_string(i));
    }
    counts_.bytes_checked += b.bytes;
  }

  // Allocate and fill on a stream, or check and free a block (on a stream
  // that may differ from the one it was filled on: ordered by an event).
  void allocation_step() {
    auto& resource = mr::get_per_device_resource(device_);
    if (blocks_.size() < 12 && random_() % 3 != 0) {
      block b{nullptr, pick_size(), random_(), pick_stream()};
      at("allocate and fill a device block", b.bytes);
      b.p = resource.allocate(b.bytes, b.stream);
      test::device_fill_pattern(b.stream, b.p, b.bytes, b.seed);
      blocks_.push_back(b);
      ++counts_.allocations;
    } else if (!blocks_.empty()) {
      const auto i = random_() % blocks_.size();
      at("check and free a device block", blocks_[i].bytes);
      check_block(blocks_[i]);
      resource.deallocate(blocks_[i].p, blocks_[i].bytes, blocks_[i].stream);
      blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  // A copy between random kinds of memory at random offsets, checked.
  void copy_step() {
    const std::size_t bytes = pick_size();
    const std::size_t offset = random_() % 64;
    const auto s = pick_stream();
    std::vector<std::uint8_t> source(bytes + offset);
    for (auto& x : source) x = static_cast<std::uint8_t>(random_());
    void* pinned = pinned_.allocate(bytes + offset, s);
    void* device = mr::get_per_device_resource(device_).allocate(bytes + offset, s);
    std::vector<std::uint8_t> back(bytes + offset, 0);
    // pageable -> device -> pinned -> device (another offset) -> pageable
    at("copy pageable to device", bytes);
    copy(static_cast<char*>(device) + offset, source.data() + offset, bytes, s);
    at("copy device to pinned", bytes);
    auto t = copy_async(static_cast<char*>(pinned) + offset, static_cast<char*>(device) + offset, bytes, s);
    t.wait();
    at("copy pinned to device", bytes);
    copy(device, static_cast<char*>(pinned) + offset, bytes, s);
    at("copy device to pageable", bytes);
    copy(back.data(), device, bytes, s);
    if (std::memcmp(back.data(), source.data() + offset, bytes) != 0) fail("a copy chain lost bytes");
    mr::get_per_device_resource(device_).deallocate(device, bytes + offset, s);
    pinned_.deallocate(pinned, bytes + offset, s);
    counts_.copies += 4;
    counts_.bytes_checked += bytes;
  }

  void check_synced(synced& s) {
    const auto* p = static_cast<const std::uint8_t*>(s.memory->host_data());
    if (s.memory->size() != s.model.size() ||
        (s.model.size() > 0 && std::memcmp(p, s.model.data(), s.model.size()) != 0)) {
      fail("a synced_memory lost bytes");
    }
    counts_.bytes_checked += s.model.size();
  }

  void synced_step() {
    if (buffers_.size() < 4) {
      synced s;
      const auto n = pick_size();
      s.memory = std::make_unique<synced_memory>(
          n, device_,
          synced_memory_options{.host_kind = random_() % 2 ? host_memory_kind::pinned : host_memory_kind::pageable});
      s.model.assign(n, 0);
      buffers_.push_back(std::move(s));
    }
    auto& s = buffers_[random_() % buffers_.size()];
    const auto n = s.model.size();
    const auto op = random_() % 6;
    static constexpr const char* steps[] = {"synced_memory: write host bytes",
                                            "synced_memory: add on the device",
                                            "synced_memory: prefetch to the device",
                                            "synced_memory: prefetch to the host",
                                            "synced_memory: resize",
                                            "synced_memory: check"};
    at(steps[op], n);
    switch (op) {
      case 0: {  // write some host bytes
        auto* p = static_cast<std::uint8_t*>(s.memory->mutable_host_data());
        const auto from = random_() % n;
        const auto to = from + 1 + random_() % (n - from);
        for (auto i = from; i < to; ++i) s.model[i] = p[i] = static_cast<std::uint8_t>(random_());
        break;
      }
      case 1: {  // add on the device, in stream order, not waited for
        const auto st = pick_stream();
        const auto delta = static_cast<std::uint8_t>(1 + random_() % 200);
        test::device_add_bytes(st, s.memory->mutable_device_data(st), n, delta);
        for (auto& x : s.model) x = static_cast<std::uint8_t>(x + delta);
        break;
      }
      case 2:
        s.memory->prefetch_to_device(pick_stream());
        break;
      case 3:
        s.memory->prefetch_to_host(pick_stream());
        break;
      case 4: {
        const auto bigger = n + random_() % 5000;
        s.memory->resize(bigger);
        s.model.resize(bigger, 0);
        break;
      }
      default:
        check_synced(s);
        break;
    }
    ++counts_.synced_ops;
  }

  device_id device_;
  std::mt19937_64 random_;
  tally& counts_;
  progress& now_;
  mr::caching_pinned_resource& pinned_;  // the engine's staging cache: shared by every thread
  std::vector<stream> streams_;
  std::vector<block> blocks_;
  std::vector<synced> buffers_;
};

template <class Kind>
class Stress : public test::device_test<Kind> {};
TYPED_TEST_SUITE(Stress, test::device_kinds, test::device_kind_names);

TYPED_TEST(Stress, ThreadsAndStreamsLoseNoByte) {
  test::scoped_emulated_delay delay{std::chrono::microseconds{10}};
  const int threads = this->is_cuda() ? 8 : 6;
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(stress_seconds()));
  tally counts;
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> pool;
  std::vector<progress> states(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    const auto device = this->dev(t % this->count());
    const auto seed = test::fresh_seed();
    progress* now = &states[static_cast<std::size_t>(t)];
    pool.emplace_back([&, device, seed, now] {
      try {
        worker{device, seed, counts, *now}.run(deadline);
      } catch (const std::exception& e) {
        std::lock_guard lock{failures_mutex};
        failures.push_back(std::string{e.what()} + " (worker seed " + std::to_string(seed) + ")");
      }
      now->finished.store(true);
    });
  }
  // The watchdog: a worker that has not finished long after the deadline is
  // stuck; say where every worker is, then abort (a stuck thread cannot be joined).
  const auto give_up = deadline + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(watchdog_seconds()));
  const auto all_finished = [&] {
    return std::all_of(states.begin(), states.end(), [](const progress& p) { return p.finished.load(); });
  };
  while (!all_finished()) {
    if (std::chrono::steady_clock::now() > give_up) {
      std::fprintf(stderr, "stress: workers still running %.0f s after the deadline:\n", watchdog_seconds());
      for (std::size_t t = 0; t < states.size(); ++t) {
        const auto& p = states[t];
        std::fprintf(stderr, "  worker %zu on %s: %s, in '%s' (%zu bytes) after %llu steps\n", t,
                     to_string(this->dev(static_cast<int>(t) % this->count())).c_str(),
                     p.finished.load() ? "finished" : "running", p.step.load(), p.bytes.load(),
                     static_cast<unsigned long long>(p.steps.load()));
      }
      std::fflush(stderr);
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  for (auto& t : pool) t.join();
  EXPECT_TRUE(failures.empty()) << failures.front();
  std::printf(
      "stress on %s devices: %llu allocations, %llu copies, %llu synced_memory operations, %llu bytes checked\n",
      this->is_cuda() ? "CUDA" : "emulated", static_cast<unsigned long long>(counts.allocations.load()),
      static_cast<unsigned long long>(counts.copies.load()), static_cast<unsigned long long>(counts.synced_ops.load()),
      static_cast<unsigned long long>(counts.bytes_checked.load()));
  EXPECT_GT(counts.allocations.load() + counts.copies.load() + counts.synced_ops.load(), 0U);
}

}  // namespace
}  // namespace syncmem
