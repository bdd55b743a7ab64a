#include "core/ignored_failure.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/log.hpp"
#include "syncmem/error.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

// Sets the library logger's level for one test and restores it after.
class log_level {
 public:
  explicit log_level(spdlog::level::level_enum level) : saved_{detail::logger().level()} {
    detail::logger().set_level(level);
  }
  ~log_level() { detail::logger().set_level(saved_); }
  log_level(const log_level&) = delete;
  log_level& operator=(const log_level&) = delete;

 private:
  spdlog::level::level_enum saved_;
};

std::string captured(auto&& f) {
  ::testing::internal::CaptureStderr();
  f();
  return ::testing::internal::GetCapturedStderr();
}

TEST(IgnoredFailure, SwallowsAndLogsWhatWasIgnoredWithTheMessage) {
  const log_level debug{spdlog::level::debug};
  bool ran = false;
  const auto logged = captured([&] {
    detail::ignore_failure("destroying a test object", [&] {
      ran = true;
      throw std::runtime_error{"the device is gone"};
    });
  });
  EXPECT_TRUE(ran);
  EXPECT_EQ(logged, "syncmem: debug: ignored a failure while destroying a test object: the device is gone\n");
}

TEST(IgnoredFailure, NamesAnExceptionOfUnknownType) {
  const log_level debug{spdlog::level::debug};
  const auto logged = captured([] { detail::ignore_failure("closing", [] { throw 42; }); });
  EXPECT_THAT(logged, HasSubstr("ignored a failure while closing: an exception of unknown type"));
}

// Expected failures log at debug level, which a normal run (level warn) does not show.
TEST(IgnoredFailure, IsQuietAtTheDefaultLevelUnlessTheFailureIsUnexpected) {
  const log_level warn{spdlog::level::warn};
  auto fail = [] { throw std::runtime_error{"boom"}; };
  EXPECT_EQ(captured([&] { detail::ignore_failure("an expected teardown", fail); }), "");
  EXPECT_EQ(captured([&] { detail::ignore_failure("a flush", fail, spdlog::level::warn); }),
            "syncmem: warning: ignored a failure while a flush: boom\n");
}

TEST(IgnoredFailure, LogIgnoredWorksInACatchBlockAndOutsideOne) {
  const log_level debug{spdlog::level::debug};
  const auto logged = captured([] {
    try {
      SYNCMEM_FAIL("bad");
    } catch (...) {
      detail::log_ignored("checking");
    }
  });
  EXPECT_THAT(logged, HasSubstr("ignored a failure while checking: syncmem: bad ["));
  EXPECT_EQ(captured([] { detail::log_ignored("nothing"); }), "syncmem: debug: ignored a failure while nothing\n");
}

TEST(IgnoredFailure, NeverThrows) {
  static_assert(noexcept(detail::log_ignored("x")));
  static_assert(noexcept(detail::ignore_failure("x", [] {})));
  const log_level off{spdlog::level::off};
  EXPECT_NO_THROW(detail::ignore_failure("x", [] { throw std::bad_alloc{}; }));
}

}  // namespace
}  // namespace syncmem
