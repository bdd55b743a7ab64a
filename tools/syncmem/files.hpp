#pragma once

// Reading and writing the command's files, and the error for bad input.

#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

namespace syncmem::tool {

// Something the user gave is wrong: an option, a file that cannot be read, or
// one whose content is not what the command expects. The command prints the
// message and exits with status 2.
class input_error : public std::runtime_error {
 public:
  explicit input_error(const std::string& message) : std::runtime_error{message} {}
};

// The whole content of `path`; `what` names the file in the message
// ("snapshot", "results").
// Throws input_error when it cannot be read.
[[nodiscard]] std::string read_file(const std::string& path, const std::string& what);

// Throws input_error unless `path` could be written: its folder exists and is
// writable, and it is not a folder itself. Checked before long work starts.
void check_writable(const std::string& path, const std::string& option);

// Writes `text` to `path`, replacing it. Throws input_error when it cannot.
void write_file(const std::string& path, const std::string& text);

// Adds the arguments of a command that draws one file as a page: the file
// (required, shown as `input_name`, e.g. "SNAPSHOT.json") and -o/--output.
void add_page_arguments(CLI::App& command, std::string& input, const std::string& input_name,
                        const std::string& input_help, std::string& output);

// The page a command draws from `input` (`what`: "snapshot", "results"):
// `output`, or `input` with .html when it is empty. Throws input_error when
// the page would overwrite `input` or could not be written.
[[nodiscard]] std::string page_path(const std::string& input, const std::string& output, const std::string& what);

}  // namespace syncmem::tool
