#pragma once

/// @file error.hpp
/// @brief The exceptions syncmem throws, and the macros that throw them.
///
/// The tree is shallow and rooted in the standard types, so that a caller can
/// catch what it knows: misuse is a `std::logic_error`; a failed device call
/// (a `device_error`, e.g. a `cuda_error`), a refused system call (a
/// `system_error`) and an unsupported operation are `std::runtime_error`s; and
/// running out of memory is a `std::bad_alloc`. Each carries what is needed to
/// act on it.

#include <cstddef>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include "syncmem/device_id.hpp"

namespace syncmem {

/// @brief Misuse or a bad argument. The message names the argument, the value
/// given and the valid range. Nothing was changed by the call that threw.
class logic_error : public std::logic_error {
 public:
  explicit logic_error(const std::string& message) : std::logic_error{message} {}
};

/// @brief A call into a device backend failed. Carries the backend that
/// failed and its native error code, so that one handler serves every backend.
class device_error : public std::runtime_error {
 public:
  /// @param message the full text `what()` returns
  /// @param kind the kind of device the backend drives
  /// @param backend the backend's name, e.g. "cuda" or "nccl"
  /// @param code the backend's own error code
  device_error(const std::string& message, device_kind kind, std::string_view backend, int code);

  /// @brief The kind of device whose backend failed.
  [[nodiscard]] device_kind kind() const noexcept { return kind_; }
  /// @brief The backend's name, e.g. "cuda" or "nccl".
  [[nodiscard]] const std::string& backend() const noexcept { return *backend_; }
  /// @brief The backend's native error code (a `cudaError_t`, `CUresult`, `ncclResult_t`...).
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  std::shared_ptr<const std::string> backend_;  // shared: copying an exception must not throw
  int code_;
  device_kind kind_;
};

/// @brief A CUDA runtime or driver call (or a library on top of CUDA, such as
/// NCCL) failed. Carries what the seeds' `checkRuntime` printed: the call's
/// text, the file and line, the CUDA error name and its message.
class cuda_error : public device_error {
 public:
  /// @param backend "cuda", or the library on top of CUDA whose call failed ("nccl")
  cuda_error(int code, std::string_view error_name, std::string_view error_message, std::string_view call,
             std::string_view file, int line, std::string_view backend = "cuda");

  /// @brief e.g. "cudaErrorMemoryAllocation".
  [[nodiscard]] const std::string& error_name() const noexcept { return details_->name; }
  /// @brief e.g. "out of memory".
  [[nodiscard]] const std::string& error_message() const noexcept { return details_->message; }
  /// @brief The text of the call that failed, e.g. "cudaMalloc(&p, bytes)".
  [[nodiscard]] const std::string& call() const noexcept { return details_->call; }
  [[nodiscard]] const std::string& file() const noexcept { return details_->file; }
  [[nodiscard]] int line() const noexcept { return line_; }

 private:
  struct details_type {
    std::string name, message, call, file;
  };
  std::shared_ptr<const details_type> details_;  // shared: copying an exception must not throw
  int line_;
};

/// @brief The environment refused a system call (mmap, memfd_create...) for a
/// reason that is neither misuse nor, as far as syncmem can tell, lack of
/// memory. A `std::system_error` whose `code()` holds the `errno` value.
///
/// The message has the form of the other errors: "syncmem: <what failed>:
/// <strerror> [file:line]".
class system_error : public std::system_error {
 public:
  /// @param error the `errno` value
  /// @param message what failed, without the error's text
  system_error(int error, std::string_view message);
  /// @brief A failure thrown at `file`:`line` (a path from the project root).
  system_error(int error, std::string_view message, std::string_view file, int line);

  [[nodiscard]] const char* what() const noexcept override { return message_->c_str(); }

 private:
  std::shared_ptr<const std::string> message_;  // shared: copying an exception must not throw
};

/// @brief What an allocation that failed knows about the failure. Fields an
/// allocator cannot know are left empty.
struct oom_info {
  std::size_t requested = 0;                      ///< bytes asked for
  std::optional<device_id> device;                ///< the device, or empty for host memory
  std::string label;                              ///< the buffer's label, when the caller had one
  std::string resource;                           ///< the memory resource that failed
  std::optional<std::size_t> device_free;         ///< free memory on the device, as the driver says
  std::optional<std::size_t> device_total;        ///< total memory of the device
  std::optional<std::size_t> reserved;            ///< bytes the allocator holds from the device
  std::optional<std::size_t> in_use;              ///< bytes handed out by the allocator
  std::optional<std::size_t> largest_free_block;  ///< largest block the allocator could hand out now
  std::optional<std::size_t> limit;               ///< a configured limit, when one applied
  std::string hint;                               ///< what to try (e.g. when fragmentation is the cause)
};

/// @brief An allocation failed for lack of memory. A `std::bad_alloc`, so
/// code that handles allocation failure generically still catches it; `info()`
/// says what was asked, where, and how memory stood.
///
/// The message has the form of the other errors: "syncmem: out of memory: ...
/// [file:line]"; SYNCMEM_OUT_OF_MEMORY stamps the place that threw.
class out_of_memory : public std::bad_alloc {
 public:
  /// @brief A failure without a source location (the message has none).
  explicit out_of_memory(oom_info info);
  /// @brief A failure thrown at `file`:`line` (a path from the project root).
  out_of_memory(oom_info info, std::string_view file, int line);

  [[nodiscard]] const char* what() const noexcept override { return state_->message.c_str(); }
  [[nodiscard]] const oom_info& info() const noexcept { return state_->info; }
  /// @brief Where it was thrown ("" and 0 when not known).
  [[nodiscard]] const std::string& file() const noexcept { return state_->file; }
  [[nodiscard]] int line() const noexcept { return state_->line; }

  /// @brief The same failure, attributed to a buffer's label.
  [[nodiscard]] out_of_memory with_label(std::string label) const;

 private:
  struct state_type {
    oom_info info;
    std::string file;
    int line = 0;
    std::string message;
  };
  std::shared_ptr<const state_type> state_;
};

/// @brief The operation cannot be done in this build or on this machine, e.g.
/// device access where there is no device.
class unsupported_error : public std::runtime_error {
 public:
  explicit unsupported_error(const std::string& message) : std::runtime_error{message} {}
};

namespace detail {

[[noreturn]] void throw_logic_error(std::string_view message, const char* file, int line);
[[noreturn]] void throw_unsupported(std::string_view message, const char* file, int line);
[[noreturn]] void throw_cuda_error(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_system_error(int error, std::string_view message, const char* file, int line);
/// @brief "syncmem: <message> [file:line]", the text every macro's exception carries.
[[nodiscard]] std::string stamp(std::string_view message, const char* file, int line);
/// @brief Throws an `Error` constructed from the stamped message.
template <class Error>
[[noreturn]] void throw_as(std::string_view message, const char* file, int line) {
  throw Error{stamp(message, file, line)};
}
[[noreturn]] void throw_out_of_memory(oom_info info, const char* file, int line);
/// @brief Reports a failed call in a destructor or other noexcept path. Stays
/// silent while the CUDA runtime is shutting down; otherwise logs one line.
void report_noexcept_failure(int code, const char* call, const char* file, int line) noexcept;
/// @brief The path from the project root ("src/core/error.cpp").
[[nodiscard]] std::string_view short_path(const char* file) noexcept;
/// @brief A byte count for people: "1.50 MiB (1572864 bytes)".
[[nodiscard]] std::string format_bytes(std::size_t bytes);

}  // namespace detail
}  // namespace syncmem

/// @brief Throws syncmem::logic_error with `message` (a string) unless
/// `condition` holds. The message is only built when the check fails.
#define SYNCMEM_EXPECTS(condition, message)                                \
  do {                                                                     \
    if (!(condition)) [[unlikely]] {                                       \
      ::syncmem::detail::throw_logic_error((message), __FILE__, __LINE__); \
    }                                                                      \
  } while (false)

/// @brief Throws syncmem::logic_error with `message` unconditionally.
#define SYNCMEM_FAIL(message) ::syncmem::detail::throw_logic_error((message), __FILE__, __LINE__)

/// @brief Throws an exception of `type` (constructible from a string) with
/// `message`, stamped like the others, e.g. SYNCMEM_FAIL_AS(syncmem::unsupported_error, "...").
#define SYNCMEM_FAIL_AS(type, message) ::syncmem::detail::throw_as<type>((message), __FILE__, __LINE__)

/// @brief Throws syncmem::system_error for the `errno` value `error` with
/// `message` (what failed), e.g. SYNCMEM_SYSTEM_FAIL(errno, "mmap of 4096 bytes").
#define SYNCMEM_SYSTEM_FAIL(error, message) \
  ::syncmem::detail::throw_system_error((error), (message), __FILE__, __LINE__)

/// @brief Throws syncmem::unsupported_error with `message`.
#define SYNCMEM_UNSUPPORTED(message) ::syncmem::detail::throw_unsupported((message), __FILE__, __LINE__)

/// @brief Throws syncmem::out_of_memory for `info` (an oom_info), stamped
/// with file and line like the other errors.
#define SYNCMEM_OUT_OF_MEMORY(info) ::syncmem::detail::throw_out_of_memory((info), __FILE__, __LINE__)

/// @brief Evaluates a CUDA runtime call; throws syncmem::cuda_error naming the
/// call, file, line, error name and message unless it returned success (0).
/// Only meaningful where the CUDA headers are included (src/backend/cuda,
/// include/syncmem/cuda), but needs none itself.
#define SYNCMEM_CUDA_TRY(call)                                                                                \
  do {                                                                                                        \
    auto const syncmem_cuda_status_ = (call);                                                                 \
    if (static_cast<int>(syncmem_cuda_status_) != 0) [[unlikely]] {                                           \
      ::syncmem::detail::throw_cuda_error(static_cast<int>(syncmem_cuda_status_), #call, __FILE__, __LINE__); \
    }                                                                                                         \
  } while (false)

/// @brief The non-throwing form, for destructors: reports a failure (silently
/// when the CUDA runtime is unloading) and carries on.
#define SYNCMEM_CUDA_CHECK_NOEXCEPT(call)                                                                            \
  do {                                                                                                               \
    auto const syncmem_cuda_status_ = (call);                                                                        \
    if (static_cast<int>(syncmem_cuda_status_) != 0) [[unlikely]] {                                                  \
      ::syncmem::detail::report_noexcept_failure(static_cast<int>(syncmem_cuda_status_), #call, __FILE__, __LINE__); \
    }                                                                                                                \
  } while (false)
