#pragma once

// Copies of this process's exported descriptors for its importers, over a
// Unix socket (SCM_RIGHTS). An importer first takes a descriptor itself
// (/proc/PID/fd, or pidfd_getfd on CUDA), which needs the right to inspect or
// trace the exporter: Yama's ptrace_scope 1 refuses pidfd_getfd to all but
// the exporter's ancestors, and hidepid hides /proc. Where it is refused, the
// importer asks the exporter's broker: a thread that listens on the abstract
// socket "syncmem-ipc-fd-PID" from the first export on, and sends a
// descriptor only to a process of the same user, only while an export of
// the registry names it. The importer checks that the socket's owner is the
// exporter (SO_PEERCRED), and still checks what it got (inode, nonce).

#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <functional>
#include <span>
#include <vector>

namespace syncmem::detail::ipc {

// Starts this process's broker, once (a forked child starts its own at its
// first export). A broker that cannot start is logged; imports then rely on
// the importer's own rights.
void start_fd_broker() noexcept;

// A copy of descriptor `fd` of process `exporter`: taken directly by `take`
// (the backend's way; -1 with errno set when refused), or, where that is
// refused or SYNCMEM_IPC_FD_BROKER=1, from the exporter's broker. Returns -1
// with errno set when neither gives it.
[[nodiscard]] int exporters_fd(pid_t exporter, int fd, const std::function<int()>& take);

// The most descriptors the broker sends in one answer; callers that need
// more ask in turns of this many, each turn one connection.
inline constexpr std::size_t fds_per_request = 64;

// Copies of descriptors of another process (exporters_fds), each closed at
// the end unless the caller takes it.
class copied_fds {
 public:
  explicit copied_fds(std::size_t count) : fds_(count, -EBADF) {}
  copied_fds(const copied_fds&) = delete;
  copied_fds& operator=(const copied_fds&) = delete;
  copied_fds(copied_fds&&) noexcept = default;
  copied_fds& operator=(copied_fds&&) = delete;
  ~copied_fds();

  [[nodiscard]] std::size_t size() const noexcept { return fds_.size(); }
  // The copy of the i-th descriptor asked for, the caller's to close from
  // now; -1 with errno set to why where it was not given.
  [[nodiscard]] int take(std::size_t i) noexcept;

 private:
  friend copied_fds exporters_fds(pid_t, std::span<const int>, const std::function<int(int)>&);
  std::vector<int> fds_;  // a descriptor, or -errno
};

// What exporters_fd gives, for each of `fds` in order, `take(fd)` being the
// backend's way: once one is refused, it and the rest come from the broker,
// up to fds_per_request in one request, not a connection each.
[[nodiscard]] copied_fds exporters_fds(pid_t exporter, std::span<const int> fds, const std::function<int(int)>& take);

// Opens /proc/EXPORTER/fd/FD: the direct way on emulated devices and for
// control pages. Returns -1 with errno set.
[[nodiscard]] int open_proc_fd(pid_t exporter, int fd);

}  // namespace syncmem::detail::ipc
