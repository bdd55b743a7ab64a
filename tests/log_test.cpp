// The library's log: SYNCMEM_LOG_LEVEL chooses its level, and a value that
// is not a level is reported instead of silencing every report. Each case
// runs in a fresh process (the logger reads the variable once).
#include "core/log.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

namespace syncmem::test {
namespace {

class Log : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

[[noreturn]] void log_with(const char* level) {
  if (level != nullptr) {
    ::setenv("SYNCMEM_LOG_LEVEL", level, 1);
  } else {
    ::unsetenv("SYNCMEM_LOG_LEVEL");
  }
  detail::logger().info("an info line");
  detail::logger().warn("a warning line");
  std::exit(0);
}

TEST_F(Log, WarningsShowByDefault) {
  EXPECT_EXIT(log_with(nullptr), ::testing::ExitedWithCode(0), "syncmem: warning: a warning line");
}

TEST_F(Log, AChosenLevelShowsWhatItShould) {
  EXPECT_EXIT(log_with("info"), ::testing::ExitedWithCode(0), "syncmem: info: an info line");
  EXPECT_EXIT(log_with("error"), ::testing::ExitedWithCode(0), "^$");
  EXPECT_EXIT(log_with("off"), ::testing::ExitedWithCode(0), "^$");
}

TEST_F(Log, AValueThatIsNotALevelIsReportedAndLoggingStaysAtWarn) {
  EXPECT_EXIT(log_with("loud"), ::testing::ExitedWithCode(0),
              "SYNCMEM_LOG_LEVEL 'loud' is not a level \\(trace, debug, info, warn, error, critical, off\\); logging "
              "at warn\n.*syncmem: warning: a warning line");
}

}  // namespace
}  // namespace syncmem::test
