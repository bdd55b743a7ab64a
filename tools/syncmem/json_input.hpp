#pragma once

// Reading JSON that a user hands the command (saved results, snapshots):
// parse errors and missing or mistyped fields become input_error messages that
// say which file, where in it, and what was expected.

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace syncmem::tool {

// Parses `text` read from `source`; throws input_error naming the line and
// column of a syntax error.
[[nodiscard]] nlohmann::json parse_json(const std::string& text, const std::string& source);

// A value inside a parsed document and its path ("segments[2].size"), so that
// every complaint about it can say where it is. Holds a reference: the
// document must outlive it.
class json_at {
 public:
  json_at(const nlohmann::json& value, std::string source, std::string path);

  [[nodiscard]] const nlohmann::json& value() const noexcept { return *value_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

  // Throws input_error: "<source>: <path>: <what>".
  [[noreturn]] void fail(std::string_view what) const;

  // Members of an object (which this must be).
  [[nodiscard]] bool has(std::string_view key) const;
  [[nodiscard]] json_at at(std::string_view key) const;  // throws when missing
  // Elements of an array (which this must be).
  [[nodiscard]] std::size_t size() const;
  [[nodiscard]] json_at at(std::size_t index) const;

  // The value as a type; throws naming the type found.
  void expect_object() const;
  void expect_array() const;
  [[nodiscard]] std::string string() const;
  [[nodiscard]] bool boolean() const;
  [[nodiscard]] double number() const;
  [[nodiscard]] std::uint64_t unsigned_integer() const;
  [[nodiscard]] std::int64_t integer() const;

 private:
  const nlohmann::json* value_;
  std::string source_;
  std::string path_;
};

}  // namespace syncmem::tool
