#include "json_input.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "files.hpp"

namespace syncmem::tool {
namespace {

std::string type_of(const nlohmann::json& v) {
  if (v.is_number_unsigned() || v.is_number_integer()) return fmt::format("the number {}", v.dump());
  if (v.is_number()) return fmt::format("the number {}", v.dump());
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    return s.size() <= 40 ? fmt::format("the string \"{}\"", s) : std::string{"a string"};
  }
  return std::string{v.type_name()};
}

}  // namespace

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's message starts with "[json.exception.parse_error.101] "; the rest says where.
    std::string what = e.what();
    if (const auto close = what.find("] "); what.starts_with("[json.exception") && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    throw input_error{fmt::format("{}: not valid JSON: {}", source, what)};
  }
}

json_at::json_at(const nlohmann::json& value, std::string source, std::string path)
    : value_{&value}, source_{std::move(source)}, path_{std::move(path)} {}

void json_at::fail(std::string_view what) const {
  if (path_.empty()) throw input_error{fmt::format("{}: {}", source_, what)};
  throw input_error{fmt::format("{}: {}: {}", source_, path_, what)};
}

bool json_at::has(std::string_view key) const {
  expect_object();
  return value_->contains(key);
}

json_at json_at::at(std::string_view key) const {
  expect_object();
  const auto it = value_->find(key);
  if (it == value_->end()) fail(fmt::format("the field \"{}\" is missing", key));
  return json_at{*it, source_, path_.empty() ? std::string{key} : fmt::format("{}.{}", path_, key)};
}

std::size_t json_at::size() const {
  expect_array();
  return value_->size();
}

json_at json_at::at(std::size_t index) const {
  expect_array();
  return json_at{(*value_)[index], source_, fmt::format("{}[{}]", path_, index)};
}

void json_at::expect_object() const {
  if (!value_->is_object()) fail(fmt::format("expected an object, found {}", type_of(*value_)));
}

void json_at::expect_array() const {
  if (!value_->is_array()) fail(fmt::format("expected an array, found {}", type_of(*value_)));
}

std::string json_at::string() const {
  if (!value_->is_string()) fail(fmt::format("expected a string, found {}", type_of(*value_)));
  return value_->get<std::string>();
}

bool json_at::boolean() const {
  if (!value_->is_boolean()) fail(fmt::format("expected true or false, found {}", type_of(*value_)));
  return value_->get<bool>();
}

double json_at::number() const {
  if (!value_->is_number()) fail(fmt::format("expected a number, found {}", type_of(*value_)));
  const double v = value_->get<double>();
  if (!std::isfinite(v)) fail("expected a finite number");
  return v;
}

std::uint64_t json_at::unsigned_integer() const {
  if (!value_->is_number_unsigned()) {
    fail(fmt::format("expected a whole number of 0 or more, found {}", type_of(*value_)));
  }
  return value_->get<std::uint64_t>();
}

std::int64_t json_at::integer() const {
  if (value_->is_number_unsigned() &&
      value_->get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return static_cast<std::int64_t>(value_->get<std::uint64_t>());
  }
  if (!value_->is_number_integer() || value_->is_number_unsigned()) {
    fail(fmt::format("expected a whole number, found {}", type_of(*value_)));
  }
  return value_->get<std::int64_t>();
}

}  // namespace syncmem::tool
