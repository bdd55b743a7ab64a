#include "test_support.hpp"

#include <cstdlib>
#include <cstring>
#include <functional>
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

scoped_emulated_delay::scoped_emulated_delay(std::chrono::microseconds delay)
    : previous_{emulated_device_options().max_delay} {
  set_emulated_delay(delay);
}

scoped_emulated_delay::~scoped_emulated_delay() { set_emulated_delay(previous_); }

}  // namespace syncmem::test
