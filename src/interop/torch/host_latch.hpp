#pragma once

// A test aid of syncmem._torch: holds a CUDA stream on a host latch, so that
// work enqueued on it after the hold provably has not run until release().
// Tests use it to free a block while the work of a recorded stream is still
// pending, without sleeps deciding anything.

#include <cuda_runtime_api.h>

#include <memory>

namespace syncmem::interop {

class host_latch {
 public:
  /// @brief Enqueues on `stream` a host function that waits for release().
  /// @throws syncmem::cuda_error when the host function cannot be enqueued
  explicit host_latch(cudaStream_t stream);
  host_latch(const host_latch&) = delete;
  host_latch& operator=(const host_latch&) = delete;
  /// @brief Releases the stream, so that it never stays held.
  ~host_latch();

  /// @brief Lets the stream go on. Idempotent.
  void release() noexcept;
  /// @brief Whether the stream has reached the latch (its earlier work is done).
  [[nodiscard]] bool reached() const noexcept;

  struct state;  // public for the host function, defined in the source

 private:
  std::shared_ptr<state> state_;  // shared with the host function, which may run after this object is gone
};

}  // namespace syncmem::interop
