// ctest-labels: threaded
// Stream capture and replay on both kinds of device: captured work runs only
// at launch, every launch with the inputs of that moment (fresh random bytes
// written into the captured source between launches, every output byte
// checked), launches ordered with other work and with each other, a held
// stream, captured host functions released with their graph, and the errors.
#include "syncmem/graph.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "backend_block.hpp"
#include "device_ops.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device_buffer.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

using ::testing::AllOf;
using ::testing::HasSubstr;

namespace syncmem::test {
namespace {

using bytes_t = std::vector<std::uint8_t>;

using block = backend_block;  // (device, size, on_device)

void copy_on(stream_view s, void* dst, const void* src, std::size_t bytes) {
  device_guard guard{s.device()};
  detail::backend_for(s.device()).memcpy_async(dst, src, bytes, s.device().index(), s.handle());
}

void memset_on(stream_view s, void* dst, int value, std::size_t bytes) {
  device_guard guard{s.device()};
  detail::backend_for(s.device()).memset_async(dst, value, bytes, s.device().index(), s.handle());
}

// Whether `watch` expires: at once on emulated devices (a stream releases
// what an operation held before it reports the operation done); CUDA runs the
// destructors of a graph's user objects on a thread of its own, some time
// after the graph and its launches are gone, so there it is given a while.
bool released(const std::weak_ptr<int>& watch, device_id d) {
  if (d.kind() == device_kind::emulated) return watch.expired();
  for (int i = 0; i < 10'000 && !watch.expired(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds{1});
  return watch.expired();
}

// The message of whatever `action` throws, or "no error".
template <class F>
std::string any_error_of(F action) {
  try {
    action();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

template <class Kind>
class Graphs : public device_test<Kind> {};
TYPED_TEST_SUITE(Graphs, device_kinds, device_kind_names);

// A step of copies, a memset and host functions: upload, overwrite a middle
// range, download, transform on the host. Nothing runs at capture; each
// launch runs all of it once, on the inputs written just before.
TYPED_TEST(Graphs, ReplaysCopiesMemsetsAndHostFunctionsOnFreshInputs) {
  scoped_emulated_delay delay{std::chrono::microseconds{50}};
  stream s{this->dev()};
  const std::size_t n = 5003, at = 1001, span = 777;
  block input{this->dev(), n, false}, on_device{this->dev(), n, true};
  block output{this->dev(), n, false}, transformed{this->dev(), n, false};
  const bytes_t output_before = random_bytes(n), transformed_before = random_bytes(n);
  input.write(random_bytes(n));
  output.write(output_before);
  transformed.write(transformed_before);
  const auto fill = static_cast<std::uint8_t>(rng()());
  auto calls = std::make_shared<std::atomic<int>>(0);

  EXPECT_FALSE(is_capturing(s));
  begin_capture(s);
  EXPECT_TRUE(is_capturing(s));
  copy_on(s, on_device.data(), input.data(), n);
  memset_on(s, on_device.data() + at, fill, span);
  copy_on(s, output.data(), on_device.data(), n);
  s.launch_host_func([calls, out = output.data(), to = transformed.data(), n] {
    for (std::size_t i = 0; i < n; ++i) to[i] = static_cast<std::uint8_t>(out[i] ^ 0x5A);
    calls->fetch_add(1);
  });
  graph step = end_capture(s);
  EXPECT_FALSE(is_capturing(s));
  EXPECT_FALSE(step.empty());
  EXPECT_EQ(step.device(), this->dev());
  s.synchronize();
  EXPECT_EQ(output.read(), output_before) << "captured copies ran before the launch";
  EXPECT_EQ(transformed.read(), transformed_before) << "a captured host function ran before the launch";
  EXPECT_EQ(calls->load(), 0);

  const int launches = 25;
  for (int round = 0; round < launches; ++round) {
    const bytes_t source = random_bytes(n);
    input.write(source);
    step.launch(s);
    s.synchronize();
    const bytes_t out = output.read(), trans = transformed.read();
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t expected = (i >= at && i < at + span) ? fill : source[i];
      ASSERT_EQ(out[i], expected) << "launch " << round << ", byte " << i;
      ASSERT_EQ(trans[i], static_cast<std::uint8_t>(expected ^ 0x5A)) << "launch " << round << ", byte " << i;
    }
    ASSERT_EQ(calls->load(), round + 1);
  }
}

// Two graphs, the second reading what the first wrote: launched in order on
// one stream, on two streams ordered by an event, and back to back without a
// synchronize between rounds, each round's input behind the last round's end.
TYPED_TEST(Graphs, LaunchesAreOrderedWithEachOtherAndWithEvents) {
  scoped_emulated_delay delay{std::chrono::microseconds{50}};
  stream s{this->dev()}, other{this->dev()};
  const std::size_t n = 4099;
  block input{this->dev(), n, false}, middle{this->dev(), n, true}, output{this->dev(), n, false};
  begin_capture(s);
  copy_on(s, middle.data(), input.data(), n);
  graph upload = end_capture(s);
  begin_capture(s);
  copy_on(s, output.data(), middle.data(), n);
  graph download = end_capture(s);

  for (int round = 0; round < 10; ++round) {
    const bytes_t source = random_bytes(n);
    input.write(source);
    upload.launch(s);
    download.launch(s);
    s.synchronize();
    ASSERT_EQ(output.read(), source) << "one stream, round " << round;

    const bytes_t again = random_bytes(n);
    input.write(again);
    event uploaded{this->dev()};
    upload.launch(s);
    uploaded.record(s);
    other.wait(uploaded);
    download.launch(other);
    other.synchronize();
    ASSERT_EQ(output.read(), again) << "two streams, round " << round;
  }
}

// A launch is one piece of work in its stream's order: behind a held latch it
// has not run, and it runs once the latch lets go. The copies go through
// device memory: CUDA runs a copy between two host buffers synchronously with
// respect to the host (cudaMemcpyAsync does, and so does a graph's memcpy
// node at launch), so a launch holding one would block behind the latch.
TYPED_TEST(Graphs, ALaunchWaitsForTheWorkBeforeIt) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream s{this->dev()};
  const std::size_t n = 3001;
  block input{this->dev(), n, false}, on_device{this->dev(), n, true}, output{this->dev(), n, false};
  auto calls = std::make_shared<std::atomic<int>>(0);
  begin_capture(s);
  copy_on(s, on_device.data(), input.data(), n);
  copy_on(s, output.data(), on_device.data(), n);
  s.launch_host_func([calls] { calls->fetch_add(1); });
  graph step = end_capture(s);

  const bytes_t before = random_bytes(n), source = random_bytes(n);
  output.write(before);
  input.write(source);
  stream_latch hold{s};
  step.launch(s);
  const auto seen = while_held(hold, [&] { return std::make_pair(output.read(), calls->load()); });
  EXPECT_EQ(seen.first, before) << "the launch ran before the work ahead of it";
  EXPECT_EQ(seen.second, 0);
  s.synchronize();
  EXPECT_EQ(output.read(), source);
  EXPECT_EQ(calls->load(), 1);
}

// A launch inside a capture is refused on both kinds of device, and the
// capture goes on.
TYPED_TEST(Graphs, ALaunchIntoACaptureIsRefused) {
  stream s{this->dev()};
  const std::size_t n = 2053;
  block input{this->dev(), n, false}, output{this->dev(), n, false};
  begin_capture(s);
  graph inner = end_capture(s);
  begin_capture(s);
  EXPECT_THAT(error_of([&] { inner.launch(s); }), HasSubstr("launching a graph inside a capture is not supported"));
  copy_on(s, output.data(), input.data(), n);
  graph outer = end_capture(s);
  const bytes_t source = random_bytes(n);
  input.write(source);
  outer.launch(s);
  s.synchronize();
  EXPECT_EQ(output.read(), source);
}

// A captured host function lives as long as the graph and its launches; a
// moved graph keeps it, an empty one cannot be launched.
TYPED_TEST(Graphs, CapturedHostFunctionsAreReleasedWithTheGraph) {
  stream s{this->dev()};
  auto token = std::make_shared<int>(0);
  const std::weak_ptr<int> watch = token;
  auto calls = std::make_shared<std::atomic<int>>(0);
  begin_capture(s);
  s.launch_host_func([token, calls] { calls->fetch_add(*token + 1); });
  graph first = end_capture(s);
  token.reset();
  EXPECT_FALSE(watch.expired()) << "the graph must keep its host function";
  graph moved = std::move(first);
  EXPECT_TRUE(first.empty());  // NOLINT(bugprone-use-after-move): a moved-from graph is empty
  EXPECT_THAT(error_of([&] { first.launch(s); }), HasSubstr("graph::launch: the graph is empty"));
  moved.launch(s);
  moved.launch(s);
  s.synchronize();
  EXPECT_EQ(calls->load(), 2);
  moved = graph{};
  s.synchronize();
  EXPECT_TRUE(released(watch, this->dev())) << "destroying the graph must release its host function";
}

TYPED_TEST(Graphs, EndingACaptureThatWasNotBegunIsAnError) {
  stream s{this->dev()};
  EXPECT_THAT(error_of([&] { return end_capture(s); }), HasSubstr("end_capture: the stream of"));
  EXPECT_THAT(error_of([&] { return end_capture(s); }), HasSubstr("is not being captured"));
  begin_capture(s);
  EXPECT_THAT(error_of([&] { begin_capture(s); }), HasSubstr("is already being captured"));
  graph g = end_capture(s);  // empty capture: a graph that does nothing
  g.launch(s);
  s.synchronize();
  EXPECT_THAT(error_of([&] { return end_capture(s); }), HasSubstr("is not being captured"));
  EXPECT_THAT(error_of([&] { begin_capture(default_stream(this->dev())); }),
              HasSubstr("default stream of " + to_string(this->dev()) + " cannot be captured"));
}

TYPED_TEST(Graphs, LaunchingOnAStreamOfAnotherDeviceIsAnError) {
  SYNCMEM_REQUIRE_COUNT(2);
  stream s{this->dev(0)}, elsewhere{this->dev(1)};
  begin_capture(s);
  graph g = end_capture(s);
  EXPECT_THAT(error_of([&] { g.launch(elsewhere); }),
              HasSubstr("a graph captured on " + to_string(this->dev(0)) + " cannot be launched on a stream of " +
                        to_string(this->dev(1))));
}

// As CUDA: synchronizing or querying a capturing stream is refused and
// invalidates the capture, whose end then says so; the stream can be captured
// again afterwards.
TYPED_TEST(Graphs, SynchronizingOrQueryingACapturingStreamInvalidatesTheCapture) {
  stream s{this->dev()};
  begin_capture(s);
  EXPECT_THAT(any_error_of([&] { s.synchronize(); }), HasSubstr("StreamCapture"));
  EXPECT_TRUE(is_capturing(s));
  EXPECT_THAT(any_error_of([&] { (void)end_capture(s); }), HasSubstr("cudaErrorStreamCaptureInvalidated"));
  EXPECT_FALSE(is_capturing(s));

  begin_capture(s);
  EXPECT_THAT(any_error_of([&] { (void)s.ready(); }), HasSubstr("StreamCapture"));
  EXPECT_THAT(any_error_of([&] { (void)end_capture(s); }), HasSubstr("cudaErrorStreamCaptureInvalidated"));

  const std::size_t n = 1031;
  block input{this->dev(), n, false}, output{this->dev(), n, false};
  begin_capture(s);
  copy_on(s, output.data(), input.data(), n);
  graph g = end_capture(s);
  const bytes_t source = random_bytes(n);
  input.write(source);
  g.launch(s);
  s.synchronize();
  EXPECT_EQ(output.read(), source);
}

// A stream destroyed with its capture open: nothing throws, the capture is
// dropped with what it recorded, and the device goes on working.
TYPED_TEST(Graphs, AStreamDestroyedWhileCapturingDropsTheCapture) {
  auto token = std::make_shared<int>(0);
  const std::weak_ptr<int> watch = token;
  {
    stream s{this->dev()};
    begin_capture(s);
    s.launch_host_func([token] { (void)*token; });
    token.reset();
  }
  EXPECT_TRUE(released(watch, this->dev())) << "the dropped capture must release its host function";
  stream again{this->dev()};
  begin_capture(again);
  graph g = end_capture(again);
  g.launch(again);
  again.synchronize();
}

// The transfer engine on a capturing stream: copies between pinned host and
// device memory are recorded and run at each launch (the transfers returned
// have nothing to wait for), on fresh inputs every time.
TYPED_TEST(Graphs, TheEngineRecordsPinnedAndDeviceCopies) {
  scoped_emulated_delay delay{std::chrono::microseconds{50}};
  stream s{this->dev()};
  const std::size_t n = 6007;
  block input{this->dev(), n, false}, on_device{this->dev(), n, true}, output{this->dev(), n, false};
  const bytes_t before = random_bytes(n);
  output.write(before);
  begin_capture(s);
  const transfer up = copy_async(on_device.data(), input.data(), n, s);
  const transfer down = copy_async(output.data(), on_device.data(), n, s);
  EXPECT_EQ(up.path(), copy_path::dma);
  EXPECT_EQ(down.path(), copy_path::dma);
  EXPECT_TRUE(up.ready()) << "a captured copy has nothing to wait for before the launch";
  EXPECT_NO_THROW(down.wait());
  graph step = end_capture(s);
  s.synchronize();
  EXPECT_EQ(output.read(), before) << "captured copies ran before the launch";
  for (int round = 0; round < 20; ++round) {
    const bytes_t source = random_bytes(n);
    input.write(source);
    step.launch(s);
    s.synchronize();
    ASSERT_EQ(output.read(), source) << "launch " << round;
  }
}

// What the engine would do with host threads, staging buffers or a wait for
// the stream cannot be captured: refused by name before anything is recorded,
// and the capture goes on.
TYPED_TEST(Graphs, TheEngineRefusesCopiesACaptureCannotHold) {
  stream s{this->dev()};
  const std::size_t n = 3083;
  block input{this->dev(), n, false}, on_device{this->dev(), n, true}, output{this->dev(), n, false};
  bytes_t pageable = random_bytes(n);
  begin_capture(s);
  const std::string captured = "the stream of " + to_string(this->dev()) + " is being captured into a graph";
  EXPECT_THAT(any_error_of([&] { (void)copy_async(on_device.data(), pageable.data(), n, s); }),
              AllOf(HasSubstr(captured), HasSubstr("from pageable memory to device memory"),
                    HasSubstr("nothing was captured")));
  EXPECT_THAT(any_error_of([&] { (void)copy_async(pageable.data(), on_device.data(), n, s); }),
              AllOf(HasSubstr(captured), HasSubstr("to pageable memory")));
  EXPECT_THAT(any_error_of([&] { (void)copy_async(output.data(), input.data(), n, s); }),
              AllOf(HasSubstr(captured), HasSubstr("from pinned memory to pinned memory")));
  EXPECT_TRUE(is_capturing(s));
  (void)copy_async(on_device.data(), input.data(), n, s);
  (void)copy_async(output.data(), on_device.data(), n, s);
  graph step = end_capture(s);
  const bytes_t source = random_bytes(n);
  input.write(source);
  step.launch(s);
  s.synchronize();
  EXPECT_EQ(output.read(), source);
}

// What emulated devices cannot record yet is refused by name, before anything
// is recorded, and the capture stays usable: a wait for an event recorded
// outside the capture.
TYPED_TEST(Graphs, EmulatedDevicesRefuseWhatTheyCannotRecord) {
  if (this->is_cuda()) GTEST_SKIP() << "CUDA records event records and waits itself";
  stream s{this->dev()}, other{this->dev()};
  event e{this->dev()};
  e.record(other);
  begin_capture(s);
  std::string message = "no error";
  try {
    s.wait(e);
  } catch (const unsupported_error& error) {
    message = error.what();
  }
  EXPECT_THAT(message, HasSubstr("an event wait (for an event recorded outside the capture) on a stream of "
                                 "emulated:0 that is being captured"));
  EXPECT_NO_THROW((void)end_capture(s));
}

// A stream forked into a capture (it waited for an event recorded there) and
// not joined back fails the capture's end, as CUDA's
// cudaErrorStreamCaptureUnjoined, and leaves both streams out of capture; the
// forked stream may not end the capture it did not begin.
TYPED_TEST(Graphs, AForkedStreamMustJoinBackBeforeTheCaptureEnds) {
  if (this->is_cuda()) GTEST_SKIP() << "the emulated devices' check of CUDA's rule";
  stream s{this->dev()}, side{this->dev()};
  const std::size_t n = 1 + rng()() % 4096;
  device_buffer a{n, side};
  begin_capture(s);
  event forked{this->dev()};
  forked.record(s);
  side.wait(forked);
  EXPECT_TRUE(is_capturing(side));
  device_add_bytes(side, a.data(), n, 1);
  EXPECT_THROW((void)end_capture(side), logic_error);
  EXPECT_THROW((void)end_capture(s), logic_error);
  EXPECT_FALSE(is_capturing(s));
  EXPECT_FALSE(is_capturing(side));
}

// A stream forked into a capture and destroyed before it joined back leaves
// the capture failing at its end, and nothing dangling behind.
TYPED_TEST(Graphs, AForkedStreamDestroyedDuringTheCaptureFailsItsEnd) {
  if (this->is_cuda())
    GTEST_SKIP() << "the emulated devices' check: CUDA leaves a destroyed capturing stream undefined";
  stream s{this->dev()};
  begin_capture(s);
  {
    stream side{this->dev()};
    event forked{this->dev()};
    forked.record(s);
    side.wait(forked);
    EXPECT_TRUE(is_capturing(side));
  }
  EXPECT_THROW((void)end_capture(s), logic_error);
  EXPECT_FALSE(is_capturing(s));
}

}  // namespace
}  // namespace syncmem::test
