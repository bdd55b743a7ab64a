#include "ipc/fd_broker.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/log.hpp"
#include "ipc/export_registry.hpp"

namespace syncmem::detail::ipc {
namespace {

constexpr char granted = 'y';
constexpr char refused = 'n';

// The abstract socket of `pid`'s broker; returns the address length.
socklen_t broker_address(pid_t pid, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  const std::string name = fmt::format("syncmem-ipc-fd-{}", pid);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

std::optional<ucred> peer_of(int socket) {
  ucred cred{};
  socklen_t length = sizeof cred;
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) return std::nullopt;
  return cred;
}

void set_timeout(int socket, int seconds) {
  const timeval t{seconds, 0};
  (void)::setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  (void)::setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
}

// Sends one status byte, with `fd` attached when it is not -1.
bool send_reply(int socket, char status, int fd) {
  iovec io{&status, 1};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return ::sendmsg(socket, &msg, MSG_NOSIGNAL) == 1;
}

void serve(int client) {
  set_timeout(client, 2);
  const auto peer = peer_of(client);
  std::int32_t wanted = -1;
  if (!peer || peer->uid != ::geteuid() || ::recv(client, &wanted, sizeof wanted, MSG_WAITALL) != sizeof wanted) {
    return;
  }
  // Sent under the registry's lock, while an export names it: it cannot be closed and reused meanwhile.
  const bool sent =
      export_registry::instance().with_named_file(wanted, [&](int fd) { send_reply(client, granted, fd); });
  if (!sent) (void)send_reply(client, refused, -1);
}

struct broker_state {
  std::mutex mutex;
  pid_t serving = 0;  // the pid whose broker runs in this process, 0 before the first start
  int listener = -1;
};

broker_state& state() {
  static auto* const s = new broker_state{};  // never destroyed: the thread may outlive main()
  return *s;
}

bool forced() {
  const char* v = std::getenv("SYNCMEM_IPC_FD_BROKER");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace

void start_fd_broker() noexcept {
  broker_state& s = state();
  const pid_t self = ::getpid();
  std::lock_guard lock{s.mutex};
  if (s.serving == self) return;
  static std::once_flag at_fork;
  std::call_once(at_fork, [] {
    // A forked child has the listener but not the thread: it starts its own broker.
    ::pthread_atfork(nullptr, nullptr, [] {
      broker_state& child = state();
      if (child.listener >= 0) ::close(child.listener);
      child.listener = -1;
      child.serving = 0;
      new (&child.mutex) std::mutex{};  // the parent's lock state does not carry over
    });
  });
  try {
    const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    const socklen_t length = broker_address(self, addr);
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), length) != 0 ||
        ::listen(listener, 64) != 0) {
      const int error = errno;
      if (listener >= 0) ::close(listener);
      logger().warn(
          "ipc: the descriptor broker of process {} did not start ({}); importers without the right to trace this "
          "process cannot open what it exports",
          self, std::strerror(error));
      s.serving = self;  // not tried again
      return;
    }
    std::thread{[listener] {
      for (;;) {
        const int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (client < 0) {
          if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) continue;
          return;
        }
        serve(client);
        ::close(client);
      }
    }}.detach();
    s.listener = listener;
    s.serving = self;
  } catch (...) {
    try {
      logger().warn("ipc: the descriptor broker did not start (no thread)");
    } catch (...) {  // NOLINT(bugprone-empty-catch): reporting must not throw
    }
  }
}

int open_proc_fd(pid_t exporter, int fd) {
  const std::string path = fmt::format("/proc/{}/fd/{}", exporter, fd);
  return ::open(path.c_str(), O_RDWR | O_CLOEXEC);
}

int exporters_fd(pid_t exporter, int fd, const std::function<int()>& take) {
  if (!forced()) {
    const int own = take();
    if (own >= 0 || (errno != EPERM && errno != EACCES)) return own;
  }
  const int socket = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (socket < 0) return -1;
  sockaddr_un addr{};
  const socklen_t length = broker_address(exporter, addr);
  const auto fail = [&](int error) {
    ::close(socket);
    errno = error;
    return -1;
  };
  if (::connect(socket, reinterpret_cast<sockaddr*>(&addr), length) != 0)
    return fail(errno == ECONNREFUSED ? ESRCH : errno);
  // The socket's name is anyone's to take: its owner must be the exporter.
  const auto peer = peer_of(socket);
  if (!peer || peer->pid != exporter || peer->uid != ::getuid()) return fail(EPERM);
  set_timeout(socket, 5);
  const std::int32_t wanted = fd;
  if (::send(socket, &wanted, sizeof wanted, MSG_NOSIGNAL) != sizeof wanted) return fail(errno);
  char status = 0;
  iovec io{&status, 1};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC) != 1) return fail(errno != 0 ? errno : EPROTO);
  int got = -1;
  if (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr && c->cmsg_type == SCM_RIGHTS) {
    std::memcpy(&got, CMSG_DATA(c), sizeof got);
  }
  ::close(socket);
  if (status != granted || got < 0) {
    if (got >= 0) ::close(got);
    errno = ENOENT;  // the exporter no longer shares it
    return -1;
  }
  return got;
}

}  // namespace syncmem::detail::ipc
