// ctest-labels: threaded
#include "syncmem/mr/logging_adaptor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>

#include "adaptor_factories.hpp"
#include "syncmem/mr/allocation_label.hpp"
#include "syncmem/mr/failure_adaptor.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {

template <device_kind Kind, int Index = 0>
struct logged : adapted_source<Kind, Index> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::logging_adaptor>(adapted_source<Kind, Index>::upstream(), std::string{"/dev/null"});
  }
};
using kinds =
    ::testing::Types<logged<device_kind::emulated>, logged<device_kind::emulated, 2>, logged<device_kind::cuda>>;
INSTANTIATE_TYPED_TEST_SUITE_P(logging_adaptor, resource_conformance, kinds);

namespace {

TEST(LoggingAdaptor, WritesOneLinePerCall) {
  mr::emulated_resource source{device_id::emulated(0)};
  mr::failure_adaptor failing{source, mr::failure_adaptor::larger_than(1 << 20)};
  std::ostringstream out;
  std::vector<std::pair<void*, std::size_t>> made;
  stream s{device_id::emulated(0)};
  {
    mr::logging_adaptor logging{failing, out};
    EXPECT_EQ(&logging.upstream(), &failing);
    {
      mr::scoped_allocation_label label{"weights, \"big\"\nlayer"};
      made.emplace_back(logging.allocate(4096, s), 4096);
    }
    made.emplace_back(logging.allocate(100, s), 100);
    EXPECT_THROW((void)logging.allocate(2 << 20, s), out_of_memory);
    for (auto [p, bytes] : made) logging.deallocate(p, bytes, s);
  }
  std::istringstream in{out.str()};
  std::string first;
  std::string second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(first, mr::logging_adaptor::format_line);
  EXPECT_EQ(second, mr::logging_adaptor::header_line);
  EXPECT_THAT(out.str(), HasSubstr("\"weights, \"\"big\"\"\nlayer\""));

  std::istringstream again{out.str()};
  const auto events = mr::logging_adaptor::read_trace(again);
  ASSERT_EQ(events.size(), 5U);
  EXPECT_EQ(events[0].action, mr::trace_action::allocate);
  EXPECT_EQ(events[0].pointer, reinterpret_cast<std::uintptr_t>(made[0].first));
  EXPECT_EQ(events[0].size, 4096U);
  EXPECT_EQ(events[0].label, "weights, \"big\"\nlayer");
  EXPECT_EQ(events[0].stream, static_cast<std::uintptr_t>(s.view().handle()));
  EXPECT_EQ(events[1].label, "");
  EXPECT_EQ(events[2].action, mr::trace_action::allocate_failure);
  EXPECT_EQ(events[2].pointer, 0U);
  EXPECT_EQ(events[2].size, std::size_t{2} << 20);
  EXPECT_EQ(events[3].action, mr::trace_action::free);
  EXPECT_EQ(events[3].pointer, events[0].pointer);
  EXPECT_EQ(events[4].pointer, events[1].pointer);
  for (std::size_t i = 1; i < events.size(); ++i) EXPECT_GE(events[i].time_ns, events[i - 1].time_ns);
  EXPECT_EQ(events[0].thread, events[4].thread);
  for (const auto& e : events)
    EXPECT_EQ(mr::logging_adaptor::format_event(e).find('\n') == std::string::npos,
              e.label.find('\n') == std::string::npos);
}

TEST(LoggingAdaptor, WritesAFileThatReadsBack) {
  const auto path =
      (std::filesystem::temp_directory_path() / ("syncmem_trace_" + std::to_string(fresh_seed()) + ".csv")).string();
  mr::emulated_resource source{device_id::emulated(1)};
  {
    mr::logging_adaptor logging{source, path};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&] {
        auto s = default_stream(device_id::emulated(1));
        for (int i = 0; i < 50; ++i) {
          void* p = logging.allocate(1000 + static_cast<std::size_t>(i), s);
          logging.deallocate(p, 1000 + static_cast<std::size_t>(i), s);
        }
      });
    }
    for (auto& t : threads) t.join();
    logging.flush();
  }
  const auto events = mr::logging_adaptor::read_trace_file(path);
  EXPECT_EQ(events.size(), 300U);
  std::set<std::uint32_t> threads;
  for (const auto& e : events) threads.insert(e.thread);
  EXPECT_EQ(threads.size(), 3U);
  std::remove(path.c_str());
  EXPECT_THROW((void)mr::logging_adaptor::read_trace_file(path), logic_error);
  EXPECT_THROW(mr::logging_adaptor(source, std::string{"/nonexistent-dir/trace.csv"}), logic_error);
}

TEST(LoggingAdaptor, RejectsMalformedTracesNamingTheLine) {
  const std::string head =
      std::string{mr::logging_adaptor::format_line} + "\n" + mr::logging_adaptor::header_line + "\n";
  const std::pair<std::string, std::string> cases[] = {
      {"nonsense\n", "line 1"},
      {std::string{mr::logging_adaptor::format_line} + "\nthread,size\n", "line 2"},
      {head + "1,2,allocate,0x10,100,0x0\n", "line 3: 6 fields"},
      {head + "1,2,allocate,0x10,100,0x0,a\n1,2,borrow,0x10,100,0x0,\n", "line 4: action 'borrow'"},
      {head + "1,2,free,16,100,0x0,\n", "pointer '16'"},
      {head + "x,2,free,0x10,100,0x0,\n", "thread 'x'"},
      {head + "1,2,free,0x10,-5,0x0,\n", "size '-5'"},
      {head + "1,2,free,0x10,5,0x0,\"open\n", "not closed"},
  };
  for (const auto& [text, names] : cases) {
    std::istringstream in{text};
    try {
      (void)mr::logging_adaptor::read_trace(in);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const logic_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(names)) << text;
    }
  }
}

}  // namespace
}  // namespace syncmem::test
