#pragma once

/// @file mr/logging_adaptor.hpp
/// @brief Writes a trace of every allocate and deallocate, which the replay
/// benchmark (and anyone) can read back.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "syncmem/mr/adaptor_base.hpp"

namespace syncmem::mr {

/// @brief What one trace line records.
enum class trace_action : std::uint8_t {
  allocate,          ///< an allocation that succeeded
  free,              ///< a deallocation
  allocate_failure,  ///< an allocation that threw (pointer 0)
};

/// @brief One line of a trace.
struct trace_event {
  std::uint32_t thread = 0;   ///< 1 for the first thread that used the process's adaptors, then 2, ...
  std::uint64_t time_ns = 0;  ///< nanoseconds since the adaptor was made
  trace_action action = trace_action::allocate;
  std::uintptr_t pointer = 0;
  std::size_t size = 0;       ///< bytes asked for (allocate) or given back (free)
  std::uintptr_t stream = 0;  ///< the stream's native handle
  std::string label;          ///< mr::current_allocation_label() of the call
};

/// @brief Forwards to its upstream and writes one line per call, as CSV:
///
///     # syncmem.trace/1
///     thread,time_ns,action,pointer,size,stream,label
///     1,1520,allocate,0x7f3a20000000,4096,0x0,weights
///     1,9830,free,0x7f3a20000000,4096,0x0,weights
///     1,10100,allocate_failure,0x0,1099511627776,0x0,
///
/// `action` is allocate, free or allocate_failure; pointer and stream are
/// hexadecimal, the rest decimal; a label holding a comma, a quote or a line
/// break is quoted as in RFC 4180. Lines are written whole, under a lock, in
/// the order the calls finished. read_trace() parses such a trace.
///
/// Device, kind and alignment are the upstream's; see memory_resource for the
/// contract. Thread safety: as every resource.
class logging_adaptor final : public adaptor_base<logging_adaptor> {
 public:
  static constexpr const char* adaptor_name = "logging_adaptor";

  /// @brief The trace's first line.
  static constexpr const char* format_line = "# syncmem.trace/1";
  /// @brief Its second line: the column names.
  static constexpr const char* header_line = "thread,time_ns,action,pointer,size,stream,label";

  /// @brief Traces to `out`, which must outlive the adaptor.
  /// @param upstream the resource allocations go to; must outlive the adaptor
  logging_adaptor(memory_resource& upstream, std::ostream& out);
  /// @brief Traces to the file at `path` (created, or truncated).
  /// @throws syncmem::logic_error when the file cannot be opened (names it)
  logging_adaptor(memory_resource& upstream, const std::string& path);
  ~logging_adaptor() override;

  /// @brief Flushes what was written to the stream or file.
  void flush();

  /// @brief Parses a trace written by a logging_adaptor.
  /// @throws syncmem::logic_error naming the line and what is wrong with it
  [[nodiscard]] static std::vector<trace_event> read_trace(std::istream& in);
  /// @brief Parses the trace in the file at `path`.
  /// @throws syncmem::logic_error when it cannot be read or parsed
  [[nodiscard]] static std::vector<trace_event> read_trace_file(const std::string& path);
  /// @brief The line for one event (without the line break).
  [[nodiscard]] static std::string format_event(const trace_event& event);

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;
  void write(trace_action action, const void* p, std::size_t bytes, stream_view stream) noexcept;

  std::unique_ptr<std::ofstream> file_;
  std::ostream* out_;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace syncmem::mr
