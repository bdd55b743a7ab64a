#include "ipc/fd_broker.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/log.hpp"
#include "ipc/export_registry.hpp"

namespace syncmem::detail::ipc {
namespace {

constexpr char granted = 'y';
constexpr char refused = 'n';
constexpr std::uint32_t request_magic = 0x44464d53;  // "SMFD": a request of this protocol
static_assert(fds_per_request <= 253, "one answer carries at most SCM_MAX_FD descriptors");

// A request: the header, then `count` descriptor numbers. The answer: one
// status byte per descriptor, with the granted ones attached in order.
struct request_header {
  std::uint32_t magic;
  std::uint32_t count;
};

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

// Sends the status bytes with `fds` attached.
bool send_reply(int socket, std::span<char> status, std::span<const int> fds) {
  iovec io{status.data(), status.size()};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * fds_per_request)] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  return ::sendmsg(socket, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(status.size());
}

void serve(int client) {
  set_timeout(client, 2);
  const auto peer = peer_of(client);
  request_header header{};
  if (!peer || peer->uid != ::geteuid() || ::recv(client, &header, sizeof header, MSG_WAITALL) != sizeof header ||
      header.magic != request_magic || header.count == 0 || header.count > fds_per_request) {
    return;
  }
  std::array<std::int32_t, fds_per_request> wanted{};
  const auto bytes = static_cast<ssize_t>(header.count * sizeof(std::int32_t));
  if (::recv(client, wanted.data(), static_cast<std::size_t>(bytes), MSG_WAITALL) != bytes) return;
  std::array<char, fds_per_request> status{};
  std::array<int, fds_per_request> given{};
  // Sent under the registry's lock, while an export names them: none can be closed and reused meanwhile.
  export_registry::instance().with_named_files([&](const auto& named) {
    std::size_t n = 0;
    for (std::uint32_t i = 0; i < header.count; ++i) {
      status[i] = named(wanted[i]) ? granted : refused;
      if (status[i] == granted) given[n++] = wanted[i];
    }
    (void)send_reply(client, std::span{status.data(), header.count}, std::span{given.data(), n});
  });
}

// Asks `exporter`'s broker for copies of `fds` (at most fds_per_request),
// writing each copy, or -errno, into `out`.
void ask_broker(pid_t exporter, std::span<const int> fds, std::span<int> out) {
  const auto fail = [&](int socket, int error) {
    if (socket >= 0) ::close(socket);
    for (int& o : out) o = -(error != 0 ? error : EPROTO);
  };
  const int socket = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (socket < 0) return fail(-1, errno);
  sockaddr_un addr{};
  const socklen_t length = broker_address(exporter, addr);
  if (::connect(socket, reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    return fail(socket, errno == ECONNREFUSED ? ESRCH : errno);
  }
  // The socket's name is anyone's to take: its owner must be the exporter.
  const auto peer = peer_of(socket);
  if (!peer || peer->pid != exporter || peer->uid != ::getuid()) return fail(socket, EPERM);
  set_timeout(socket, 5);
  std::array<std::int32_t, 2 + fds_per_request> request{};
  const request_header header{request_magic, static_cast<std::uint32_t>(fds.size())};
  std::memcpy(request.data(), &header, sizeof header);
  std::copy(fds.begin(), fds.end(), request.begin() + 2);
  const auto request_bytes = static_cast<ssize_t>((2 + fds.size()) * sizeof(std::int32_t));
  if (::send(socket, request.data(), static_cast<std::size_t>(request_bytes), MSG_NOSIGNAL) != request_bytes) {
    return fail(socket, errno);
  }
  std::array<char, fds_per_request> status{};
  iovec io{status.data(), fds.size()};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * fds_per_request)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  errno = 0;
  const ssize_t got = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  std::array<int, fds_per_request> given{};
  std::size_t n = 0;
  if (cmsghdr* c = CMSG_FIRSTHDR(&msg); got > 0 && c != nullptr && c->cmsg_type == SCM_RIGHTS) {
    n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    std::memcpy(given.data(), CMSG_DATA(c), n * sizeof(int));
  }
  const int error = errno;
  ::close(socket);
  std::size_t next = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (got != static_cast<ssize_t>(fds.size())) {
      out[i] = -(error != 0 ? error : EPROTO);
    } else if (status[i] == granted && next < n) {
      out[i] = given[next++];
    } else {
      out[i] = -ENOENT;  // the exporter no longer shares it
    }
  }
  for (; next < n; ++next) ::close(given[next]);  // an answer that does not add up: none is used
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

copied_fds::~copied_fds() {
  for (const int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

int copied_fds::take(std::size_t i) noexcept {
  const int fd = fds_[i];
  if (fd < 0) {
    errno = -fd;
    return -1;
  }
  fds_[i] = -EBADF;
  return fd;
}

copied_fds exporters_fds(pid_t exporter, std::span<const int> fds, const std::function<int(int)>& take) {
  copied_fds out{fds.size()};
  std::size_t i = 0;
  if (!forced()) {
    for (; i < fds.size(); ++i) {
      const int own = take(fds[i]);
      if (own < 0 && (errno == EPERM || errno == EACCES)) break;  // refused: this and the rest from the broker
      out.fds_[i] = own >= 0 ? own : -(errno != 0 ? errno : EBADF);
    }
  }
  for (; i < fds.size(); i += fds_per_request) {
    const std::size_t n = std::min(fds_per_request, fds.size() - i);
    ask_broker(exporter, fds.subspan(i, n), std::span{out.fds_}.subspan(i, n));
  }
  return out;
}

int exporters_fd(pid_t exporter, int fd, const std::function<int()>& take) {
  copied_fds copy = exporters_fds(exporter, std::span{&fd, 1}, [&](int) { return take(); });
  return copy.take(0);
}

}  // namespace syncmem::detail::ipc
