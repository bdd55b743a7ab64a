// ctest-labels: threaded
// synced_memory against a plain reference model: random sequences of every
// operation (reads and writes on both sides, prefetches on several streams,
// resizes, borrows, clones, moves), with the contents of every valid side and
// the copy counters checked after every step. The counters must equal the
// model's minimum: only necessary copies happen.
//
// SYNCMEM_MODEL_SEQUENCES sets the number of sequences per device kind
// (default 1500 on emulated devices, 300 on CUDA).

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "backend/backend.hpp"
#include "core/deferred_release.hpp"
#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/synced_memory.hpp"
#include "test_support.hpp"

namespace syncmem {

void PrintTo(sync_state state, std::ostream* os) { *os << to_string(state); }

namespace {

using test::read_device;

// ---------------------------------------------------------------------------
// The reference model: contents and which side is newest, nothing else.
// ---------------------------------------------------------------------------
struct model {
  std::vector<std::uint8_t> bytes;
  sync_state state = sync_state::uninitialized;
  std::size_t host_bytes = 0;    // allocated or borrowed host side (0: none)
  std::size_t device_bytes = 0;  // likewise for the device side
  bool host_borrowed = false;
  bool device_borrowed = false;
  std::size_t capacity = 0;
  transfer_counters counters;
  std::uint64_t reallocations = 0;

  std::size_t size() const { return bytes.size(); }
  std::size_t effective_capacity() const {
    std::size_t c = capacity;
    if (host_bytes != 0) c = std::min(c, host_bytes);
    if (device_bytes != 0) c = std::min(c, device_bytes);
    return c;
  }

  void need_host() {
    if (size() == 0) return;
    if (host_bytes == 0) host_bytes = capacity;
    if (state == sync_state::uninitialized) {
      state = sync_state::at_host;
    } else if (state == sync_state::at_device) {
      ++counters.to_host_copies;
      counters.to_host_bytes += size();
      state = sync_state::synced;
    }
  }
  void need_device() {
    if (size() == 0) return;
    if (device_bytes == 0) device_bytes = capacity;
    if (state == sync_state::uninitialized) {
      state = sync_state::at_device;
    } else if (state == sync_state::at_host) {
      ++counters.to_device_copies;
      counters.to_device_bytes += size();
      state = sync_state::synced;
    }
  }
  void write_host() {
    need_host();
    if (state != sync_state::uninitialized) state = sync_state::at_host;
  }
  void write_device() {
    need_device();
    if (state != sync_state::uninitialized) state = sync_state::at_device;
  }
  void prefetch_host() {
    if (state == sync_state::at_device && size() > 0) need_host();
  }

  // Returns false when the resize must throw (borrowed memory, throw policy).
  bool resize(std::size_t n, resize_mode mode, bool move_to_owned) {
    if (n <= effective_capacity()) {
      if (mode == resize_mode::discard) {
        bytes.assign(n, 0);
        state = sync_state::uninitialized;
      } else {
        if (n > size()) {  // an empty buffer's valid sides get memory when it grows
          if ((state == sync_state::at_host || state == sync_state::synced) && host_bytes == 0) host_bytes = capacity;
          if ((state == sync_state::at_device || state == sync_state::synced) && device_bytes == 0) {
            device_bytes = capacity;
          }
        }
        bytes.resize(n, 0);                             // the tail reads as zeros (zero_fill)
        if (n == 0) state = sync_state::uninitialized;  // an empty buffer holds no contents
      }
      return true;
    }
    const bool host_small = host_bytes != 0 && host_bytes < n;
    const bool device_small = device_bytes != 0 && device_bytes < n;
    if (((host_small && host_borrowed) || (device_small && device_borrowed)) && !move_to_owned) return false;
    auto drop_small = [&] {
      if (host_small) host_bytes = 0, host_borrowed = false;
      if (device_small) device_bytes = 0, device_borrowed = false;
    };
    if (mode == resize_mode::discard || state == sync_state::uninitialized) {
      drop_small();
      bytes.assign(n, 0);
      state = sync_state::uninitialized;
    } else {
      bool use_host = state == sync_state::at_host;
      if (state == sync_state::synced) use_host = !host_small && device_small;
      if (use_host) {
        if (host_small || host_bytes == 0) host_bytes = n, host_borrowed = false;
        if (device_small) device_bytes = 0, device_borrowed = false;
        state = sync_state::at_host;
      } else {
        if (device_small || device_bytes == 0) {
          if (size() > 0) {
            ++counters.device_copies;
            counters.device_bytes += size();
          }
          device_bytes = n;
          device_borrowed = false;
        }
        if (host_small) host_bytes = 0, host_borrowed = false;
        state = sync_state::at_device;
      }
      bytes.resize(n, 0);
    }
    capacity = n;
    ++reallocations;
    return true;
  }
};

// Memory a sequence lends to the buffer. Its keep-alive poisons it when let
// go, so that any later access by the library shows as wrong bytes, and hands
// it to a quarantine freed only when the sequence ends.
class lender {
 public:
  explicit lender(device_id device) : device_{device} {}
  lender(const lender&) = delete;
  lender& operator=(const lender&) = delete;
  ~lender() {
    detail::drain_deferred_releases();
    std::lock_guard lock{mutex_};
    for (auto& free : quarantine_) free();
  }

  std::shared_ptr<void> host(std::size_t n, bool pinned) {
    const std::size_t bytes = std::max<std::size_t>(n, 1);
    auto& backend = detail::backend_for(device_);
    void* p = pinned ? backend.allocate_pinned(bytes, 0) : ::operator new(bytes);
    return std::shared_ptr<void>{p, [this, bytes, pinned, &backend](void* q) {
                                   std::memset(q, 0xEE, bytes);
                                   quarantine([=, &backend] {
                                     if (pinned) {
                                       backend.deallocate_pinned(q, bytes);
                                     } else {
                                       ::operator delete(q);
                                     }
                                   });
                                 }};
  }

  std::shared_ptr<void> device(std::size_t n) {
    const std::size_t bytes = std::max<std::size_t>(n, 1);
    device_guard guard{device_};
    void* p = detail::backend_for(device_).allocate(device_.index(), bytes);
    return std::shared_ptr<void>{p, [this, bytes](void* q) {
                                   device_guard g{device_};
                                   auto& backend = detail::backend_for(device_);
                                   const auto s = default_stream(device_);
                                   backend.memset_async(q, 0xEE, bytes, device_.index(), s.handle());
                                   s.synchronize();
                                   quarantine([this, q, bytes] {
                                     device_guard g2{device_};
                                     detail::backend_for(device_).deallocate(device_.index(), q, bytes);
                                   });
                                 }};
  }

 private:
  void quarantine(std::function<void()> free) {
    std::lock_guard lock{mutex_};
    quarantine_.push_back(std::move(free));
  }

  device_id device_;
  std::mutex mutex_;
  std::vector<std::function<void()>> quarantine_;
};

void write_device(stream_view s, void* p, const std::uint8_t* src, std::size_t n) {
  if (n == 0) return;
  device_guard guard{s.device()};
  detail::backend_for(s.device()).memcpy_async(p, src, n, s.device().index(), s.handle());
  s.synchronize();
}

::testing::AssertionResult same(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                                const char* side) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << side << " has " << got.size() << " bytes, model " << want.size();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure() << side << " byte " << i << " of " << got.size() << " is " << int{got[i]}
                                           << ", model says " << int{want[i]};
    }
  }
  return ::testing::AssertionSuccess();
}

int sequences_for(device_kind kind) {
  if (const char* text = std::getenv("SYNCMEM_MODEL_SEQUENCES")) return std::max(1, std::atoi(text));
  return kind == device_kind::cuda ? 300 : 1500;
}

// One random sequence on `device`. Returns a description of the failure, or "".
void run_sequence(device_id device, std::mt19937_64& random, std::ostringstream& log) {
  lender lend{device};  // outlives the buffer: its memory is freed after the last release
  std::vector<stream> streams;
  for (int i = 0; i < 3; ++i) streams.emplace_back(device);
  auto pick_stream = [&]() -> stream_view {
    const auto k = random() % 4;
    return k == 3 ? default_stream(device) : streams[k].view();
  };
  auto size_of = [&]() -> std::size_t {
    switch (random() % 4) {
      case 0:
        return random() % 16;
      case 1:
        return random() % 1000;
      case 2:
        return random() % 20000;
      default:
        return random() % 200000;
    }
  };

  synced_memory_options options;
  options.label = "model";
  options.host_kind = random() % 2 == 0 ? host_memory_kind::pinned : host_memory_kind::pageable;
  options.on_borrowed_growth = random() % 2 == 0 ? borrow_policy::throw_on_growth : borrow_policy::move_to_owned;
  const bool move_to_owned = options.on_borrowed_growth == borrow_policy::move_to_owned;
  const std::size_t initial = size_of();
  auto buffer = std::make_unique<synced_memory>(initial, device, options);
  model m;
  m.bytes.assign(initial, 0);
  m.capacity = initial;
  log << "new(" << initial << ", " << (options.host_kind == host_memory_kind::pinned ? "pinned" : "pageable") << ")";

  const int steps = 10 + static_cast<int>(random() % 30);
  for (int step = 0; step < steps; ++step) {
    const auto op = random() % 16;
    log << "; ";
    switch (op) {
      case 0: {  // host read
        log << "host_data";
        const auto* p = static_cast<const std::uint8_t*>(buffer->host_data());
        m.need_host();
        std::vector<std::uint8_t> got(p, p + buffer->size());
        ASSERT_TRUE(same(got, m.bytes, "host_data"));
        break;
      }
      case 1:
      case 2: {  // host write of a random range
        auto* p = static_cast<std::uint8_t*>(buffer->mutable_host_data());
        m.write_host();
        if (m.size() == 0) {
          log << "mutable_host_data(empty)";
          break;
        }
        const auto from = random() % m.size();
        const auto to = from + 1 + random() % (m.size() - from);
        log << "mutable_host_data[" << from << "," << to << ")";
        for (auto i = from; i < to; ++i) m.bytes[i] = p[i] = static_cast<std::uint8_t>(random());
        break;
      }
      case 3: {  // device read, checked in order on that stream
        const auto s = pick_stream();
        log << "device_data";
        const void* p = buffer->device_data(s);
        m.need_device();
        ASSERT_TRUE(same(read_device(s, p, m.size()), m.bytes, "device_data"));
        break;
      }
      case 4:
      case 5: {  // device write in stream order, not waited for
        const auto s = pick_stream();
        auto* p = static_cast<std::uint8_t*>(buffer->mutable_device_data(s));
        m.write_device();
        if (m.size() == 0) {
          log << "mutable_device_data(empty)";
          break;
        }
        const auto from = random() % m.size();
        const auto to = from + 1 + random() % (m.size() - from);
        const auto delta = static_cast<std::uint8_t>(1 + random() % 250);
        log << "mutable_device_data[" << from << "," << to << ")+=" << int{delta};
        if (random() % 3 == 0) test::device_sleep(s, std::chrono::microseconds{200});
        test::device_add_bytes(s, p + from, to - from, delta);
        for (auto i = from; i < to; ++i) m.bytes[i] = static_cast<std::uint8_t>(m.bytes[i] + delta);
        break;
      }
      case 6: {
        log << "prefetch_to_device";
        buffer->prefetch_to_device(pick_stream());
        m.need_device();
        break;
      }
      case 7: {
        log << "prefetch_to_host";
        buffer->prefetch_to_host(pick_stream());
        m.prefetch_host();
        break;
      }
      case 8:
      case 9: {
        const auto n = random() % 2 == 0 ? size_of() : m.size() + random() % 64;
        const auto mode = random() % 4 == 0 ? resize_mode::discard : resize_mode::keep;
        log << "resize(" << n << (mode == resize_mode::keep ? ", keep)" : ", discard)");
        const bool ok = m.resize(n, mode, move_to_owned);
        if (ok) {
          buffer->resize(n, mode);
        } else {
          ASSERT_THROW(buffer->resize(n, mode), logic_error);
        }
        break;
      }
      case 10: {
        const auto n = size_of();
        const bool pinned = random() % 2 == 0;
        log << "borrow_host(" << n << (pinned ? ", pinned)" : ", pageable)");
        auto memory = lend.host(n, pinned);
        auto* p = static_cast<std::uint8_t*>(memory.get());
        std::vector<std::uint8_t> contents(n);
        for (auto& b : contents) b = static_cast<std::uint8_t>(random());
        if (n > 0) std::memcpy(p, contents.data(), n);
        buffer->borrow_host(p, n, memory);
        m.bytes = contents;
        m.host_bytes = n;
        m.host_borrowed = n > 0;
        if (m.device_bytes != 0 && m.device_bytes < n) m.device_bytes = 0, m.device_borrowed = false;
        m.capacity = std::max(m.capacity, n);
        m.state = n == 0 ? sync_state::uninitialized : sync_state::at_host;
        break;
      }
      case 11: {
        const auto n = size_of();
        log << "borrow_device(" << n << ")";
        auto memory = lend.device(n);
        std::vector<std::uint8_t> contents(n);
        for (auto& b : contents) b = static_cast<std::uint8_t>(random());
        write_device(default_stream(device), memory.get(), contents.data(), n);
        buffer->borrow_device(memory.get(), n, memory);
        m.bytes = contents;
        m.device_bytes = n;
        m.device_borrowed = n > 0;
        if (m.host_bytes != 0 && m.host_bytes < n) m.host_bytes = 0, m.host_borrowed = false;
        m.capacity = std::max(m.capacity, n);
        m.state = n == 0 ? sync_state::uninitialized : sync_state::at_device;
        break;
      }
      case 12: {  // a clone has the same contents and state, and is independent
        log << "clone";
        auto copy = buffer->clone();
        copy.synchronize();
        ASSERT_EQ(copy.state(), m.size() == 0 ? sync_state::uninitialized : m.state);
        ASSERT_EQ(copy.size(), m.size());
        const auto* p = static_cast<const std::uint8_t*>(copy.host_data());
        ASSERT_TRUE(same(std::vector<std::uint8_t>(p, p + copy.size()), m.bytes, "clone"));
        if (copy.size() > 0) static_cast<std::uint8_t*>(copy.mutable_host_data())[0] ^= 0xFF;
        break;
      }
      case 13: {  // moves keep everything; the source refuses use
        log << "move";
        synced_memory moved = std::move(*buffer);
        ASSERT_THROW((void)buffer->host_data(), logic_error);
        *buffer = std::move(moved);
        break;
      }
      case 14: {  // a stream destroyed and made anew: it may get the same handle, yet is another stream
        const auto k = random() % streams.size();
        log << "recycle_stream(" << k << ")";
        { stream dead = std::move(streams[k]); }
        streams[k] = stream{device};
        break;
      }
      default: {
        log << "synchronize";
        buffer->synchronize();
        break;
      }
    }

    // After every step: state, size, counters, and every valid side's bytes.
    buffer->synchronize();
    ASSERT_EQ(buffer->state(), m.state);
    ASSERT_EQ(buffer->size(), m.size());
    ASSERT_EQ(buffer->capacity(), m.effective_capacity());
    ASSERT_EQ(buffer->reallocations(), m.reallocations);
    ASSERT_EQ(buffer->counters(), m.counters)
        << "copies to device " << buffer->counters().to_device_copies << " (model " << m.counters.to_device_copies
        << "), to host " << buffer->counters().to_host_copies << " (model " << m.counters.to_host_copies
        << "), on device " << buffer->counters().device_copies << " (model " << m.counters.device_copies << ")";
    ASSERT_EQ(buffer->host_borrowed(), m.host_borrowed);
    ASSERT_EQ(buffer->device_borrowed(), m.device_borrowed);
    if (m.state == sync_state::at_host || m.state == sync_state::synced) {
      const auto* p = static_cast<const std::uint8_t*>(buffer->host_data());  // no copy: the host side is valid
      ASSERT_TRUE(same(std::vector<std::uint8_t>(p, p + buffer->size()), m.bytes, "host side"));
    }
    if (m.state == sync_state::at_device || m.state == sync_state::synced) {
      const auto s = pick_stream();
      const void* p = buffer->device_data(s);  // no copy: the device side is valid
      ASSERT_TRUE(same(read_device(s, p, m.size()), m.bytes, "device side"));
    }
    ASSERT_EQ(buffer->counters(), m.counters) << "checking the sides copied";
  }
}

template <class Kind>
class SyncedMemoryModel : public test::device_test<Kind> {};
TYPED_TEST_SUITE(SyncedMemoryModel, test::device_kinds, test::device_kind_names);

TYPED_TEST(SyncedMemoryModel, RandomSequencesMatchTheModel) {
  test::scoped_emulated_delay delay{std::chrono::microseconds{20}};
  // SYNCMEM_MODEL_SEED replays one sequence (the failure message names its seed).
  const char* replay = std::getenv("SYNCMEM_MODEL_SEED");
  const int sequences = replay != nullptr ? 1 : sequences_for(this->kind);
  for (int i = 0; i < sequences; ++i) {
    const auto seed = replay != nullptr ? std::strtoull(replay, nullptr, 0) : test::fresh_seed();
    std::mt19937_64 random{seed};
    const auto device = this->dev(static_cast<int>(random() % static_cast<std::uint64_t>(this->count())));
    std::ostringstream log;
    run_sequence(device, random, log);
    if (::testing::Test::HasFatalFailure()) {
      ADD_FAILURE() << "sequence " << i << " on " << to_string(device) << " (seed " << seed << "): " << log.str();
      return;
    }
  }
}

}  // namespace
}  // namespace syncmem
