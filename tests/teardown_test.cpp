// Objects destroyed after main() and after the CUDA runtime has begun shutting
// down: no abort, nothing printed (run in a child process).

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <string>

#include "syncmem/device.hpp"

namespace {

struct outcome {
  int status;
  std::string output;
};

outcome run_child(const std::string& environment, const std::string& mode) {
  const std::string command = environment + " " SYNCMEM_TEARDOWN_CHILD " " + mode + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  std::array<char, 4096> chunk{};
  while (auto n = std::fread(chunk.data(), 1, chunk.size(), pipe)) output.append(chunk.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output};
}

TEST(Teardown, EmulatedDeviceObjectsOutliveMainQuietly) {
  for (const char* mode : {"return", "exit"}) {
    const auto r = run_child("SYNCMEM_EMULATED_DEVICES=2 SYNCMEM_EMULATED_DELAY_US=50 CUDA_VISIBLE_DEVICES=", mode);
    EXPECT_EQ(r.status, 0) << mode << ": " << r.output;
    EXPECT_EQ(r.output, "") << mode;
  }
}

TEST(Teardown, CudaDeviceObjectsOutliveTheCudaRuntimeQuietly) {
  if (syncmem::device_count(syncmem::device_kind::cuda) == 0) GTEST_SKIP() << "no CUDA device";
  for (const char* mode : {"return", "exit"}) {
    const auto r = run_child("", mode);
    EXPECT_EQ(r.status, 0) << mode << ": " << r.output;
    EXPECT_EQ(r.output, "") << mode;
  }
}

}  // namespace
