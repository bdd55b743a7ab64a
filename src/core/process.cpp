#include "core/process.hpp"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace syncmem::detail {

bool process_alive(pid_t pid) noexcept {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  // An exited child that its parent has not reaped yet still answers kill():
  // /proc/<pid>/stat says Z (zombie) or X (dead) for it.
  try {
    std::ifstream stat{"/proc/" + std::to_string(pid) + "/stat"};
    std::string line;
    if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
    const auto close = line.rfind(')');          // the command may hold spaces and parentheses
    if (close == std::string::npos || close + 2 >= line.size()) return true;
    const char state = line[close + 2];
    return state != 'Z' && state != 'X';
  } catch (...) {
    return true;
  }
}

}  // namespace syncmem::detail
