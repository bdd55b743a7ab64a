#pragma once

// Reading and writing the command's files, and the error for bad input.

#include <stdexcept>
#include <string>

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

}  // namespace syncmem::tool
