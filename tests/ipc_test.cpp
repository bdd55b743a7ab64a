// ipc: device memory shared with another process (tests/support/ipc_peer.cpp,
// a real process started for each test): bytes written before the export are
// what the importer reads, the importer's writes are the exporter's, a handle
// imports once, bad handles are clear errors, and the exporter gets its memory
// back when the importer closes it or dies. Every step is decided by the test:
// the exporter's stream is held on a host latch, and the peer answers line by
// line.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "device_ops.hpp"
#include "ipc_bytes.hpp"
#include "pattern.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device_buffer.hpp"
#include "syncmem/ipc.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/device_resource.hpp"
#include "syncmem/synced_memory.hpp"
#include "test_support.hpp"

extern char** environ;

using ::testing::HasSubstr;

namespace syncmem {
namespace {

using test::fnv1a;
using test::seeded_bytes;

// ipc_peer, started with pipes on its stdin and stdout.
class peer {
 public:
  peer() {
    std::array<int, 2> in{};
    std::array<int, 2> out{};
    if (::pipe(in.data()) != 0 || ::pipe(out.data()) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<std::string> env_strings{"SYNCMEM_EMULATED_DEVICES=" + std::to_string(test::emulated_test_devices)};
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "SYNCMEM_EMULATED_DEVICES=", 25) != 0) env_strings.emplace_back(*e);
    }
    std::vector<char*> env;
    for (auto& e : env_strings) env.push_back(e.data());
    env.push_back(nullptr);
    std::string program = SYNCMEM_IPC_PEER;
    std::array<char*, 2> argv{program.data(), nullptr};
    const int status = ::posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(), env.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
    if (status != 0) throw std::runtime_error(fmt::format("posix_spawn of {} failed: {}", program, status));
  }
  peer(const peer&) = delete;
  peer& operator=(const peer&) = delete;
  ~peer() {
    ::close(to_);  // the peer ends at the end of its input
    if (pid_ > 0) wait();
    ::close(from_);
  }

  // Sends one command and returns the peer's answer; "" when it gave none within a minute.
  std::string ask(const std::string& command) {
    const std::string line = command + "\n";
    if (::write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "";
    return read_line();
  }
  void kill() const { ::kill(pid_, SIGKILL); }
  // Waits for the peer to end; its exit status, or 128 + the signal.
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  std::string read_line() {
    std::string line;
    char c = 0;
    while (true) {
      pollfd p{from_, POLLIN, 0};
      if (::poll(&p, 1, 60000) <= 0) return "";
      if (::read(from_, &c, 1) != 1) return line;
      if (c == '\n') return line;
      line += c;
    }
  }

  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
};

// A buffer of fresh random bytes, big enough to be shared on every backend.
std::shared_ptr<device_buffer> random_buffer(stream_view s, std::vector<std::uint8_t>& bytes) {
  const std::size_t size = (std::size_t{64} << 10) + test::rng()() % (std::size_t{4} << 20);
  bytes = test::random_bytes(size);
  auto b = std::make_shared<device_buffer>(bytes.data(), size, s);
  s.synchronize();
  return b;
}

template <class Kind>
class Ipc : public test::device_test<Kind> {};
TYPED_TEST_SUITE(Ipc, test::device_kinds, test::device_kind_names);

TYPED_TEST(Ipc, TheImporterReadsWhatTheExporterWroteBeforeExporting) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream s{this->dev()};
  std::vector<std::uint8_t> first;
  auto buffer = random_buffer(s, first);
  const std::weak_ptr<device_buffer> watch = buffer;
  // The stream is held; the write the importer must see is behind the latch.
  test::stream_latch hold{s};
  const std::uint64_t seed = test::fresh_seed();
  test::device_fill_pattern(s, buffer->data(), buffer->size(), seed);
  std::vector<std::uint8_t> second(buffer->size());
  test::write_pattern(second.data(), second.size(), seed);
  const auto h = ipc::export_memory(buffer->data(), buffer->size(), s, buffer);
  buffer.reset();
  EXPECT_EQ(h.device(), this->dev());
  EXPECT_EQ(h.size(), second.size());
  EXPECT_EQ(h.exporter(), ::getpid());

  peer other;
  ASSERT_EQ(other.ask("import " + h.to_hex()), "ok");
  // The importer's stream waits for the exporter's write, which cannot have run.
  EXPECT_EQ(other.ask("pending"), "1");
  hold.release();
  EXPECT_EQ(other.ask("checksum"), fnv1a(second));
  EXPECT_NE(fnv1a(first), fnv1a(second));
  // Held for the importer until it closes the memory.
  EXPECT_EQ(ipc::collect(), 0U);
  EXPECT_FALSE(watch.expired());
  ASSERT_EQ(other.ask("close"), "ok");
  EXPECT_EQ(ipc::collect(), 1U);
  EXPECT_EQ(ipc::exports_held(), 0U);
  EXPECT_TRUE(watch.expired());
}

TYPED_TEST(Ipc, WhatTheImporterWritesIsTheExportersMemory) {
  stream s{this->dev()};
  std::vector<std::uint8_t> bytes;
  auto buffer = random_buffer(s, bytes);
  // A range inside the allocation, at an offset.
  const std::size_t offset = test::rng()() % (buffer->size() / 2);
  const std::size_t size = buffer->size() - offset;
  auto* at = static_cast<std::uint8_t*>(buffer->data()) + offset;
  const auto h = ipc::export_memory(at, size, s, buffer);
  peer other;
  ASSERT_EQ(other.ask("import " + h.to_hex()), "ok");
  const std::uint64_t seed = test::fresh_seed();
  ASSERT_EQ(other.ask(fmt::format("fill {}", seed)), "ok");
  ASSERT_EQ(other.ask("close"), "ok");
  auto expected = bytes;
  const auto written = seeded_bytes(seed, size);
  std::copy(written.begin(), written.end(), expected.begin() + static_cast<std::ptrdiff_t>(offset));
  std::vector<std::uint8_t> now(buffer->size());
  buffer->copy_to_host(now.data(), now.size(), s);
  EXPECT_EQ(now, expected);
  EXPECT_EQ(ipc::collect(), 1U);
}

TYPED_TEST(Ipc, AHandleImportsOnce) {
  stream s{this->dev()};
  std::vector<std::uint8_t> bytes;
  auto buffer = random_buffer(s, bytes);
  const auto h = ipc::export_memory(buffer->data(), buffer->size(), s, buffer);
  peer first;
  peer second;
  ASSERT_EQ(first.ask("import " + h.to_hex()), "ok");
  EXPECT_THAT(first.ask("import " + h.to_hex()), HasSubstr("imported already"));
  EXPECT_THAT(second.ask("import " + h.to_hex()), HasSubstr("imported already"));
  // The failed imports changed nothing: the first still reads the bytes.
  EXPECT_EQ(first.ask("checksum"), fnv1a(bytes));
  ASSERT_EQ(first.ask("close"), "ok");
  EXPECT_THAT(second.ask("import " + h.to_hex()), HasSubstr("closed already"));
  EXPECT_EQ(ipc::collect(), 1U);
}

TYPED_TEST(Ipc, AnImporterThatDiesGivesTheMemoryBackAtTheNextCollect) {
  stream s{this->dev()};
  std::vector<std::uint8_t> bytes;
  auto buffer = random_buffer(s, bytes);
  const std::weak_ptr<device_buffer> watch = buffer;
  const auto h = ipc::export_memory(buffer->data(), buffer->size(), s, buffer);
  buffer.reset();
  peer other;
  ASSERT_EQ(other.ask("import " + h.to_hex()), "ok");
  EXPECT_EQ(ipc::collect(), 0U);
  other.kill();
  EXPECT_EQ(other.wait(), 128 + SIGKILL);
  EXPECT_EQ(ipc::collect(), 1U);
  EXPECT_TRUE(watch.expired());
}

// An allocation that would fail for lack of memory first gives back what the
// exports of dead importers held.
TYPED_TEST(Ipc, AnAllocationShortOfMemoryTakesBackWhatADeadImporterHeld) {
  stream s{this->dev()};
  mr::caching_options options;
  const std::size_t block = (std::size_t{24} << 20) + test::rng()() % (std::size_t{4} << 20);
  options.limit = block + (block / 2);  // room for one such block, not two
  auto resource = std::make_shared<mr::caching_resource>(this->dev(), options);
  void* p = resource->allocate(block, s);
  std::weak_ptr<void> watch;
  ipc::memory_handle h;
  {
    const stream_view sv = s;
    std::shared_ptr<void> owner{p, [resource, block, sv](void* q) { resource->deallocate(q, block, sv); }};
    watch = owner;
    h = ipc::export_memory(p, block, s, owner);
  }
  peer other;
  ASSERT_EQ(other.ask("import " + h.to_hex()), "ok");
  EXPECT_THROW((void)resource->allocate(block, s), out_of_memory) << "the importer still holds the block";
  EXPECT_FALSE(watch.expired());
  other.kill();
  other.wait();
  void* again = resource->allocate(block, s);  // no collect() called: the allocation collects
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(ipc::exports_held(), 0U);
  resource->deallocate(again, block, s);
}

TYPED_TEST(Ipc, BadHandlesAreClearErrors) {
  stream s{this->dev()};
  std::vector<std::uint8_t> bytes;
  auto buffer = random_buffer(s, bytes);
  const auto h = ipc::export_memory(buffer->data(), buffer->size(), s, buffer);
  const auto raw = h.bytes();

  EXPECT_THAT(test::error_of([&] {
                return ipc::memory_handle::from_bytes(std::span{raw.data(), raw.size() - 1});
              }),
              HasSubstr("a handle has 256 bytes, not 255"));
  EXPECT_THAT(test::error_of([&] { return ipc::memory_handle::from_hex(std::string(512, 'x')); }),
              HasSubstr("not hexadecimal"));
  const auto noise = test::random_bytes(ipc::memory_handle::size_in_bytes);
  EXPECT_THAT(test::error_of([&] { return ipc::memory_handle::from_bytes(std::as_bytes(std::span{noise})); }),
              HasSubstr("not a syncmem IPC handle"));
  EXPECT_THAT(test::error_of([&] { return ipc::import_memory(ipc::memory_handle{}, s); }), HasSubstr("empty"));

  // The nonce (bytes 40-47) names the export: another one is a forgery.
  std::array<std::byte, ipc::memory_handle::size_in_bytes> forged{};
  std::copy(raw.begin(), raw.end(), forged.begin());
  forged[40 + test::rng()() % 8] ^= std::byte{0x5a};
  peer other;
  EXPECT_THAT(other.ask("import " + ipc::memory_handle::from_bytes(forged).to_hex()),
              HasSubstr("does not match the export"));
  // A stream of another device.
  if (this->count() > 1) {
    stream elsewhere{this->dev(1)};
    EXPECT_THAT(test::error_of([&] { return ipc::import_memory(h, elsewhere); }),
                HasSubstr(fmt::format("shares memory of {}, and the stream is on {}", to_string(this->dev()),
                                      to_string(this->dev(1)))));
  }
  // The real handle still imports, in this very process too.
  auto same = ipc::import_memory(h, s);
  EXPECT_EQ(same.data(), buffer->data());
  EXPECT_EQ(test::read_device(s, same.data(), bytes.size()), bytes);
  same.close();
  EXPECT_EQ(ipc::collect(), 1U);
}

TYPED_TEST(Ipc, AHandleOfAnExporterThatExitedIsAClearError) {
  peer exporter;
  const std::string hex =
      exporter.ask(fmt::format("export {} 0 {} {}", this->is_cuda() ? "cuda" : "emulated", 1 << 20, 7));
  ASSERT_EQ(hex.size(), 2 * ipc::memory_handle::size_in_bytes) << hex;
  exporter.ask("exit");
  exporter.wait();
  stream s{this->dev()};
  EXPECT_THAT(test::error_of([&] { return ipc::import_memory(ipc::memory_handle::from_hex(hex), s); }),
              HasSubstr("no longer shares this memory"));
}

TYPED_TEST(Ipc, SyncedMemorySharesItsDeviceSide) {
  stream s{this->dev()};
  const std::size_t size = (std::size_t{64} << 10) + test::rng()() % (std::size_t{1} << 20);
  const auto bytes = test::random_bytes(size);
  auto memory = std::make_shared<synced_memory>(size, this->dev());
  std::memcpy(memory->mutable_host_data(), bytes.data(), size);
  const auto h = ipc::export_synced(memory, s);
  peer other;
  ASSERT_EQ(other.ask("import " + h.to_hex()), "ok");
  EXPECT_EQ(other.ask("checksum"), fnv1a(bytes));
  const std::uint64_t seed = test::fresh_seed();
  ASSERT_EQ(other.ask(fmt::format("fill {}", seed)), "ok");
  ASSERT_EQ(other.ask("close"), "ok");
  // The export left the device side newest: the host side reads the importer's bytes.
  const auto* host = static_cast<const std::uint8_t*>(memory->host_data());
  EXPECT_EQ(std::vector<std::uint8_t>(host, host + size), seeded_bytes(seed, size));
  EXPECT_EQ(ipc::collect(), 1U);
}

// A block of the growable range spans pages, each exported on its own (a
// memfd, or a CUDA POSIX file descriptor): the importer maps them side by
// side, as the exporter has them.
TYPED_TEST(Ipc, BlocksOfTheGrowableRangeAreShared) {
  const device_id device = this->dev();
  stream s{device};
  mr::caching_options options;
  options.expandable = true;
  auto resource = std::make_shared<mr::caching_resource>(device, options);
  // Past a first block, so that the shared one starts inside a page and spans several.
  const std::size_t first = 4096 + test::rng()() % (std::size_t{1} << 20);
  void* before = resource->allocate(first, s);
  const std::size_t size = (std::size_t{5} << 20) + test::rng()() % (std::size_t{8} << 20);
  void* p = resource->allocate(size, s);
  if (resource->snapshot().segments.at(0).pool != mr::segment_pool::expandable) {
    resource->deallocate(p, size, s);
    resource->deallocate(before, first, s);
    GTEST_SKIP() << to_string(device) << " has no virtual memory management";
  }
  const auto bytes = test::random_bytes(size);
  copy(p, bytes.data(), size, s);
  std::weak_ptr<void> watch;
  ipc::memory_handle h;
  {
    const stream_view sv = s;
    std::shared_ptr<void> owner{p, [resource, size, sv](void* q) { resource->deallocate(q, size, sv); }};
    watch = owner;
    h = ipc::export_memory(p, size, s, owner);
  }
  peer other;
  ASSERT_EQ(other.ask("import " + h.to_hex()), "ok");
  EXPECT_EQ(other.ask("checksum"), fnv1a(bytes));
  const std::uint64_t seed = test::fresh_seed();
  ASSERT_EQ(other.ask(fmt::format("fill {}", seed)), "ok");
  ASSERT_EQ(other.ask("close"), "ok");
  EXPECT_EQ(test::read_device(s, p, size), seeded_bytes(seed, size));
  EXPECT_EQ(ipc::collect(), 1U);
  EXPECT_TRUE(watch.expired()) << "the block went back to its resource";
  resource->deallocate(before, first, s);
}

TEST(IpcEmulated, ImportedMemoryOutlivesItsExporter) {
  const device_id device = device_id::emulated(0);
  peer exporter;
  const std::size_t size = std::size_t{1} << 20;
  const std::uint64_t seed = test::fresh_seed();
  const std::string hex = exporter.ask(fmt::format("export emulated 0 {} {}", size, seed));
  ASSERT_EQ(hex.size(), 2 * ipc::memory_handle::size_in_bytes) << hex;
  stream s{device};
  auto imported = ipc::import_memory(ipc::memory_handle::from_hex(hex), s);
  exporter.ask("exit");
  exporter.wait();
  EXPECT_EQ(test::read_device(s, imported.data(), size), seeded_bytes(seed, size));
}

TEST(IpcEmulated, SmallAllocationsCannotBeSharedAndSayWhy) {
  const device_id device = device_id::emulated(0);
  stream s{device};
  mr::emulated_resource plain{device};  // a backend allocation of its own, not a caching segment
  device_buffer small{1000, s, &plain};
  EXPECT_THAT(test::error_of([&] { return ipc::export_memory(small.data(), small.size(), s, nullptr); }),
              HasSubstr("emulated devices share allocations of 64 KiB and more"));
  EXPECT_EQ(ipc::exports_held(), 0U);
}

}  // namespace
}  // namespace syncmem
