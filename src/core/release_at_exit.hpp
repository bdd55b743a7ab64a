#pragma once

// The library's never-destroyed caches (the per-device allocators, the
// default pinned host resource, the engine's staging) give their cached free
// memory back when the process exits, while the CUDA runtime is still up:
// nothing then looks leaked to leak checkers such as compute-sanitizer, and
// memory in use by objects destroyed later stays valid.

#include <functional>

namespace syncmem::detail {

// Runs `release` once at exit (after main returns or exit() is called), in
// the reverse order of registration. It must not throw.
void release_at_exit(std::function<void()> release);

}  // namespace syncmem::detail
