#pragma once

// Whether another process still runs, for what it shares with this one.

#include <sys/types.h>

namespace syncmem::detail {

// False once `pid` has exited, zombie or reaped; true while it runs (also
// where this process may not signal it).
[[nodiscard]] bool process_alive(pid_t pid) noexcept;

}  // namespace syncmem::detail
