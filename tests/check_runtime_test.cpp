#include "syncmem/compat/check_runtime.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.hpp"

using ::testing::HasSubstr;

namespace {

int fake_cuda_call(int code) { return code; }

TEST(CheckRuntime, SuccessIsTrueAndSilent) {
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(checkRuntime(fake_cuda_call(0)));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(CheckRuntime, FailureIsFalseAndReportsLikeTheSeed) {
  ::testing::internal::CaptureStderr();
  const int line = __LINE__ + 1;
  EXPECT_FALSE(checkRuntime(fake_cuda_call(2)));
  const std::string printed = ::testing::internal::GetCapturedStderr();
  const std::string expected_start =
      std::string{"runtime error "} + __FILE__ + ":" + std::to_string(line) + "  fake_cuda_call(2) failed. \n  code = ";
  EXPECT_EQ(printed.rfind(expected_start, 0), 0U) << printed;
  EXPECT_THAT(printed, HasSubstr(syncmem::detail::cuda_error_name(2)));
  EXPECT_THAT(printed, HasSubstr(std::string{", message = "} + syncmem::detail::cuda_error_message(2) + "\n"));
  if (syncmem::detail::cuda_compiled()) {
    EXPECT_THAT(printed, HasSubstr("code = cudaErrorMemoryAllocation, message = out of memory"));
  }
}

}  // namespace
