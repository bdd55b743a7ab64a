#include "test_support.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

namespace syncmem::test {
namespace {

std::uint64_t initial_seed() {
  if (const char* text = std::getenv("SYNCMEM_TEST_SEED"); text != nullptr && *text != '\0') {
    return std::strtoull(text, nullptr, 0);
  }
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

}  // namespace

bool cuda_required() {
  const char* text = std::getenv("SYNCMEM_REQUIRE_CUDA");
  return text != nullptr && std::strcmp(text, "0") != 0 && *text != '\0';
}

std::uint64_t run_seed() {
  static const std::uint64_t seed = initial_seed();
  return seed;
}

std::mt19937_64& rng() {
  thread_local std::mt19937_64 engine{run_seed() ^ std::hash<std::thread::id>{}(std::this_thread::get_id())};
  return engine;
}

std::uint64_t fresh_seed() { return rng()(); }

std::vector<std::uint8_t> random_bytes(std::size_t n) {
  std::vector<std::uint8_t> bytes(n);
  auto& engine = rng();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const auto word = engine();
    std::memcpy(bytes.data() + i, &word, 8);
  }
  if (i < n) {
    const auto word = engine();
    std::memcpy(bytes.data() + i, &word, n - i);
  }
  return bytes;
}

thread_failures run_threads(int threads, const std::function<void(int)>& body) {
  std::atomic<int> failures{0};
  std::mutex mutex;
  std::string first;
  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        body(t);
      } catch (const std::exception& e) {
        ++failures;
        std::lock_guard lock{mutex};
        if (first.empty()) first = e.what();
      }
    });
  }
  for (auto& w : workers) w.join();
  return {failures.load(), first};
}

scoped_emulated_delay::scoped_emulated_delay(std::chrono::microseconds delay)
    : previous_{emulated_device_options().max_delay} {
  set_emulated_delay(delay);
}

scoped_emulated_delay::~scoped_emulated_delay() { set_emulated_delay(previous_); }

}  // namespace syncmem::test
