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

#include <functional>

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

// Opens /proc/EXPORTER/fd/FD: the direct way on emulated devices and for
// control pages. Returns -1 with errno set.
[[nodiscard]] int open_proc_fd(pid_t exporter, int fd);

}  // namespace syncmem::detail::ipc
