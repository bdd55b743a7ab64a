#include "files.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace syncmem::tool {

void add_page_arguments(CLI::App& command, std::string& input, const std::string& input_name,
                        const std::string& input_help, std::string& output) {
  const std::string stem = input_name.substr(0, input_name.find('.'));
  std::string name = stem;  // "snapshot", as CLI11 names it in "snapshot is required"
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  command.add_option(name, input, input_help)->type_name(input_name)->required();
  command.add_option("-o,--output", output, fmt::format("The page to write (default: {} with .html)", stem))
      ->type_name("FILE");
}

std::string page_path(const std::string& input, const std::string& output, const std::string& what) {
  std::string page = output;
  if (page.empty()) page = std::filesystem::path{input}.replace_extension(".html").string();
  if (page == input) throw input_error{fmt::format("-o: the page would overwrite the {}; name another file", what)};
  check_writable(page, "-o");
  return page;
}

std::string read_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw input_error{fmt::format("cannot read {} '{}': it is a folder", what, path)};
  std::ifstream in{path, std::ios::binary};
  if (!in) throw input_error{fmt::format("cannot read {} '{}': {}", what, path, std::strerror(errno))};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw input_error{fmt::format("cannot read {} '{}': {}", what, path, std::strerror(errno))};
  return std::move(text).str();
}

void check_writable(const std::string& path, const std::string& option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p{path};
  if (path.empty()) throw input_error{fmt::format("{}: the file name is empty", option)};
  if (fs::is_directory(p, ec)) throw input_error{fmt::format("{} '{}': that is a folder, not a file", option, path)};
  const fs::path folder = p.has_parent_path() ? p.parent_path() : fs::path{"."};
  if (!fs::is_directory(folder, ec)) {
    throw input_error{fmt::format("{} '{}': the folder '{}' does not exist", option, path, folder.string())};
  }
  if (::access(folder.c_str(), W_OK) != 0) {
    throw input_error{
        fmt::format("{} '{}': cannot write in '{}': {}", option, path, folder.string(), std::strerror(errno))};
  }
  if (fs::exists(p, ec) && ::access(p.c_str(), W_OK) != 0) {
    throw input_error{fmt::format("{} '{}': {}", option, path, std::strerror(errno))};
  }
}

void write_file(const std::string& path, const std::string& text) {
  // Written beside it, then renamed over it: a reader, or a run stopped
  // mid-write, sees the old file or the new one whole.
  const std::string partial = path + ".partial";
  std::ofstream out{partial, std::ios::binary | std::ios::trunc};
  if (!out) throw input_error{fmt::format("cannot write '{}': {}", path, std::strerror(errno))};
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out || std::rename(partial.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(partial.c_str());
    throw input_error{fmt::format("cannot write '{}': {}", path, std::strerror(error))};
  }
}

}  // namespace syncmem::tool
