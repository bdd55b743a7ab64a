#include "syncmem/mr/logging_adaptor.hpp"

#include <atomic>
#include <charconv>
#include <istream>
#include <ostream>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr {

namespace {

std::uint32_t this_thread_number() {
  static std::atomic<std::uint32_t> next{1};
  thread_local const std::uint32_t number = next.fetch_add(1, std::memory_order_relaxed);
  return number;
}

std::string_view action_name(trace_action a) {
  switch (a) {
    case trace_action::allocate:
      return "allocate";
    case trace_action::free:
      return "free";
    case trace_action::allocate_failure:
      return "allocate_failure";
  }
  return "allocate";
}

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string{text};
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

// Splits one CSV record into fields; `line` may continue on the next lines
// when a quoted field holds a line break (read_trace joins them first).
bool split_csv(std::string_view line, std::vector<std::string>& fields) {
  fields.clear();
  std::string field;
  bool quoted = false;
  bool was_quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        field += c;
      }
    } else if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
      was_quoted = false;
    } else if (c == '"' && field.empty() && !was_quoted) {
      quoted = true;
      was_quoted = true;
    } else {
      field += c;
    }
  }
  fields.push_back(std::move(field));
  return !quoted;
}

template <class T>
bool parse_number(std::string_view text, T& value, int base) {
  if (base == 16) {
    if (!text.starts_with("0x") && !text.starts_with("0X")) return false;
    text.remove_prefix(2);
  }
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  return ec == std::errc{} && ptr == text.data() + text.size();
}

[[noreturn]] void reject_line(std::size_t number, const std::string& what) {
  SYNCMEM_FAIL(fmt::format("trace line {}: {}", number, what));
}

}  // namespace

logging_adaptor::logging_adaptor(memory_resource& upstream, std::ostream& out)
    : adaptor_base{upstream}, out_{&out}, start_{std::chrono::steady_clock::now()} {
  *out_ << format_line << '\n' << header_line << '\n';
}

logging_adaptor::logging_adaptor(memory_resource& upstream, const std::string& path)
    : adaptor_base{upstream},
      file_{std::make_unique<std::ofstream>(path, std::ios::out | std::ios::trunc)},
      out_{file_.get()},
      start_{std::chrono::steady_clock::now()} {
  SYNCMEM_EXPECTS(file_->is_open(), fmt::format("logging_adaptor: cannot open the trace file '{}' for writing", path));
  *out_ << format_line << '\n' << header_line << '\n';
}

logging_adaptor::~logging_adaptor() {
  try {
    flush();
  } catch (...) {
    syncmem::detail::log_ignored("flushing the allocation trace in logging_adaptor's destructor",
                                 spdlog::level::warn);  // a destructor does not throw
  }
}

void logging_adaptor::flush() {
  std::lock_guard lock{mutex_};
  out_->flush();
}

std::string logging_adaptor::format_event(const trace_event& e) {
  return fmt::format("{},{},{},{:#x},{},{:#x},{}", e.thread, e.time_ns, action_name(e.action), e.pointer, e.size,
                     e.stream, csv_field(e.label));
}

void logging_adaptor::write(trace_action action, const void* p, std::size_t bytes, stream_view stream) noexcept {
  try {
    trace_event e;
    e.thread = this_thread_number();
    e.action = action;
    e.pointer = reinterpret_cast<std::uintptr_t>(p);
    e.size = bytes;
    e.stream = static_cast<std::uintptr_t>(stream.handle());
    e.label = std::string{current_allocation_label()};
    std::lock_guard lock{mutex_};
    e.time_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
    *out_ << format_event(e) << '\n';
  } catch (...) {
    // tracing never fails the call it traces
    syncmem::detail::log_ignored("writing an allocation trace event");
  }
}

void* logging_adaptor::do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  void* p = nullptr;
  try {
    p = upstream().allocate(bytes, stream, alignment);
  } catch (...) {
    write(trace_action::allocate_failure, nullptr, bytes, stream);
    throw;
  }
  write(trace_action::allocate, p, bytes, stream);
  return p;
}

void logging_adaptor::do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept {
  // Written before the memory goes back, so that a reader never sees a
  // pointer allocated again before it was freed.
  write(trace_action::free, p, bytes, stream);
  upstream().deallocate(p, bytes, stream, alignment);
}

std::vector<trace_event> logging_adaptor::read_trace(std::istream& in) {
  std::vector<trace_event> events;
  std::string line;
  std::size_t number = 0;
  auto fail = [&number](const std::string& what) { reject_line(number, what); };
  if (!std::getline(in, line) || (++number, line != format_line)) {
    number = 1;
    fail(fmt::format("expected '{}' (a trace written by logging_adaptor)", format_line));
  }
  if (!std::getline(in, line) || (++number, line != header_line)) fail(fmt::format("expected '{}'", header_line));
  std::vector<std::string> fields;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    std::string record = line;
    while (!split_csv(record, fields)) {  // a quoted label with a line break
      if (!std::getline(in, line)) fail("a quoted label is not closed");
      ++number;
      record += '\n';
      record += line;
    }
    if (fields.size() != 7) fail(fmt::format("{} fields, expected 7 ({})", fields.size(), header_line));
    trace_event e;
    if (!parse_number(fields[0], e.thread, 10)) fail(fmt::format("thread '{}' is not a number", fields[0]));
    if (!parse_number(fields[1], e.time_ns, 10)) fail(fmt::format("time_ns '{}' is not a number", fields[1]));
    if (fields[2] == "allocate") {
      e.action = trace_action::allocate;
    } else if (fields[2] == "free") {
      e.action = trace_action::free;
    } else if (fields[2] == "allocate_failure") {
      e.action = trace_action::allocate_failure;
    } else {
      fail(fmt::format("action '{}' is not allocate, free or allocate_failure", fields[2]));
    }
    if (!parse_number(fields[3], e.pointer, 16))
      fail(fmt::format("pointer '{}' is not hexadecimal (0x...)", fields[3]));
    if (!parse_number(fields[4], e.size, 10)) fail(fmt::format("size '{}' is not a number", fields[4]));
    if (!parse_number(fields[5], e.stream, 16)) fail(fmt::format("stream '{}' is not hexadecimal (0x...)", fields[5]));
    e.label = std::move(fields[6]);
    events.push_back(std::move(e));
  }
  return events;
}

std::vector<trace_event> logging_adaptor::read_trace_file(const std::string& path) {
  std::ifstream in{path};
  SYNCMEM_EXPECTS(in.is_open(), fmt::format("cannot open the trace file '{}'", path));
  return read_trace(in);
}

}  // namespace syncmem::mr
