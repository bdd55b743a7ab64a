// fd_broker: an exporter's broker hands an importer a copy of a descriptor an
// export names, and nothing else, alone or many at once; a process with no
// broker, or a broker that is not the exporter's, gives nothing.
#include "ipc/fd_broker.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "syncmem/device_id.hpp"
#include "syncmem/ipc.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::test {
namespace {

// The importer's own way refused, as Yama refuses pidfd_getfd to a non-ancestor.
int refused() {
  errno = EPERM;
  return -1;
}

struct stat_of {
  ino_t inode;
  dev_t device;
};

stat_of identity(int fd) {
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0);
  return {st.st_ino, st.st_dev};
}

TEST(FdBroker, GivesWhatAnExportNamesAndNothingElse) {
  if (device_count(device_kind::emulated) == 0) GTEST_SKIP() << "needs emulated devices";
  const device_id d = device_id::emulated(0);
  stream s{d};
  auto& resource = mr::default_resource(d);
  const std::size_t n = (1 << 20) + 4096;
  void* p = resource.allocate(n, s);
  const ipc::memory_handle h = ipc::export_memory(p, n, s, nullptr);

  // Stdin is open here but no export names it.
  errno = 0;
  EXPECT_EQ(detail::ipc::exporters_fd(::getpid(), 0, refused), -1);
  EXPECT_EQ(errno, ENOENT);

  // The descriptors the export names (the control page's, the memory's) are
  // given: a copy of the same file.
  int found = -1;
  for (int fd = 3; fd < 1024 && found < 0; ++fd) {
    const int copy = detail::ipc::exporters_fd(::getpid(), fd, refused);
    if (copy >= 0) {
      const auto a = identity(copy), b = identity(fd);
      EXPECT_EQ(a.inode, b.inode);
      EXPECT_EQ(a.device, b.device);
      ::close(copy);
      found = fd;
    }
  }
  EXPECT_GE(found, 0) << "the broker gave none of the descriptors the export names";

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int copy = detail::ipc::exporters_fd(::getppid(), found, refused);
    ::_exit(copy >= 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "another process of the same user is served";

  // Once the export is released, nothing is given.
  {
    auto imported = ipc::import_memory(h, s);  // this process imports it, then lets go
  }
  ipc::collect();
  EXPECT_EQ(ipc::exports_held(), 0u);
  errno = 0;
  EXPECT_EQ(detail::ipc::exporters_fd(::getpid(), found, refused), -1) << "no export names it any more";
  EXPECT_EQ(errno, ENOENT);
  resource.deallocate(p, n, s);
  s.synchronize();
}

// Many asked for at once (as an import of many pages asks): each named one
// is given and each other refused on its own, over as many requests as it takes.
TEST(FdBroker, GivesManyInOneRequestEachOnItsOwn) {
  if (device_count(device_kind::emulated) == 0) GTEST_SKIP() << "needs emulated devices";
  const device_id d = device_id::emulated(0);
  stream s{d};
  auto& resource = mr::default_resource(d);
  const std::size_t n = (1 << 20) + 4096;
  void* p = resource.allocate(n, s);
  const ipc::memory_handle h = ipc::export_memory(p, n, s, nullptr);
  std::vector<int> named;
  for (int fd = 3; fd < 1024; ++fd) {
    const int copy = detail::ipc::exporters_fd(::getpid(), fd, refused);
    if (copy >= 0) {
      ::close(copy);
      named.push_back(fd);
    }
  }
  ASSERT_FALSE(named.empty());
  // More than one request holds, each named descriptor and stdin (named by no export) in turn.
  std::vector<int> wanted;
  while (wanted.size() <= detail::ipc::fds_per_request + 1) {
    wanted.insert(wanted.end(), named.begin(), named.end());
    wanted.push_back(0);
  }
  detail::ipc::copied_fds copies = detail::ipc::exporters_fds(::getpid(), wanted, [](int) { return refused(); });
  ASSERT_EQ(copies.size(), wanted.size());
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    errno = 0;
    const int copy = copies.take(i);
    if (wanted[i] == 0) {
      EXPECT_EQ(copy, -1) << "stdin, at " << i;
      EXPECT_EQ(errno, ENOENT);
      continue;
    }
    ASSERT_GE(copy, 0) << "descriptor " << wanted[i] << ", at " << i;
    const auto a = identity(copy), b = identity(wanted[i]);
    EXPECT_EQ(a.inode, b.inode);
    EXPECT_EQ(a.device, b.device);
    ::close(copy);
  }
  { auto imported = ipc::import_memory(h, s); }
  ipc::collect();
  resource.deallocate(p, n, s);
  s.synchronize();
}

TEST(FdBroker, AProcessWithoutABrokerGivesNothing) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  errno = 0;
  EXPECT_EQ(detail::ipc::exporters_fd(child, 0, refused), -1);
  EXPECT_NE(errno, 0);
  ::kill(child, SIGKILL);
  int status = 0;
  (void)::waitpid(child, &status, 0);
}

}  // namespace
}  // namespace syncmem::test
