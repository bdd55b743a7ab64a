// process_alive: true for a running process, false once it has exited,
// whether or not its parent has reaped it yet.
#include "core/process.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

namespace syncmem::detail {
namespace {

TEST(Process, AliveUntilItExitsReapedOrNot) {
  EXPECT_TRUE(process_alive(::getpid()));
  EXPECT_FALSE(process_alive(0));
  EXPECT_FALSE(process_alive(-1));
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c = 0;
    (void)::read(ready[0], &c, 1);  // runs until told to exit
    ::_exit(0);
  }
  EXPECT_TRUE(process_alive(child));
  ASSERT_EQ(::write(ready[1], "x", 1), 1);
  // Exited and not reaped: a zombie, which kill() still finds.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_FALSE(process_alive(child));
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(process_alive(child));
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace syncmem::detail
