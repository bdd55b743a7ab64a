#include "syncmem/mr/caching_options.hpp"

#include <charconv>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "syncmem/error.hpp"

namespace syncmem::mr {

namespace {

constexpr const char* environment_variable = "SYNCMEM_ALLOC_CONF";
constexpr const char* known_keys =
    "max_split_mb, expandable, limit_mb, thread_cache_mb, release_before_grow, grow_from_idle, expandable_page_mb, "
    "expandable_large_page_mb, compact";
constexpr std::uint64_t max_split_mb_max = std::uint64_t{1} << 24;
constexpr std::uint64_t limit_mb_max = std::uint64_t{1} << 30;
constexpr std::uint64_t thread_cache_mb_max = 65536;
constexpr std::uint64_t expandable_page_mb_max = 1024;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<std::uint64_t> whole_number(std::string_view text) {
  std::uint64_t value = 0;
  if (text.empty()) return std::nullopt;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string mib_text(std::optional<std::size_t> bytes) {
  if (!bytes || *bytes == std::numeric_limits<std::size_t>::max()) return "unlimited";
  if (*bytes % (std::size_t{1} << 20) == 0) return std::to_string(*bytes >> 20);
  return fmt::format("{:.6g}", static_cast<double>(*bytes) / (1 << 20));  // set by API, not in whole MiB
}

[[noreturn]] void reject(std::string_view source, std::string_view text, const std::string& what) {
  SYNCMEM_FAIL(fmt::format("{} '{}': {}", source, text, what));
}

}  // namespace

caching_options caching_options::parse(std::string_view text, std::string_view source) {
  return caching_options{}.with(text, source);
}

caching_options caching_options::with(std::string_view text, std::string_view source) const {
  caching_options o = *this;
  std::set<std::string, std::less<>> seen;
  auto fail = [&](const std::string& what) { reject(source, text, what); };
  auto mib = [&](std::string_view key, std::string_view value, std::uint64_t low, std::uint64_t high,
                 bool unlimited_allowed) -> std::optional<std::size_t> {
    if (unlimited_allowed && value == "unlimited") return std::nullopt;
    auto n = whole_number(value);
    if (!n || *n < low || *n > high) {
      reject(source, text,
             fmt::format("the value '{}' of {} is not a whole number of MiB in {}..{}{}", value, key, low, high,
                         unlimited_allowed ? " (or 'unlimited')" : ""));
    }
    return static_cast<std::size_t>(*n) << 20;
  };
  auto boolean = [&](std::string_view key, std::string_view value) {
    if (value == "1" || value == "true") return true;
    if (value != "0" && value != "false") {
      reject(source, text, fmt::format("the value '{}' of {} is not 0, 1, false or true", value, key));
    }
    return false;
  };
  std::string_view rest = text;
  if (trim(rest).empty()) return o;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view entry = trim(rest.substr(0, comma));
    if (entry.empty()) fail("an empty entry (two commas in a row, or a comma at an end)");
    const auto colon = entry.find(':');
    const std::string_view key = trim(entry.substr(0, colon));
    if (colon == std::string_view::npos) fail(fmt::format("'{}' has no value: write it as key:value", key));
    const std::string_view value = trim(entry.substr(colon + 1));
    if (key.empty()) fail(fmt::format("the entry '{}' has no key", entry));
    if (value.empty()) fail(fmt::format("'{}' has no value after the colon", key));
    if (!seen.emplace(key).second) fail(fmt::format("'{}' is given twice", key));
    if (key == "max_split_mb") {
      o.max_split_size = mib(key, value, 1, max_split_mb_max, true).value_or(std::numeric_limits<std::size_t>::max());
    } else if (key == "expandable") {
      o.expandable = boolean(key, value);
    } else if (key == "release_before_grow") {
      o.release_before_grow = boolean(key, value);
    } else if (key == "grow_from_idle") {
      o.grow_from_idle = boolean(key, value);
    } else if (key == "compact") {
      o.compact_under_pressure = boolean(key, value);
    } else if (key == "expandable_page_mb") {
      o.expandable_page_size = *mib(key, value, 0, expandable_page_mb_max, false);
    } else if (key == "expandable_large_page_mb") {
      o.expandable_large_page_size = *mib(key, value, 0, expandable_page_mb_max, false);
    } else if (key == "limit_mb") {
      o.limit = mib(key, value, 1, limit_mb_max, true);
    } else if (key == "thread_cache_mb") {
      o.thread_cache_size = *mib(key, value, 0, thread_cache_mb_max, false);
    } else {
      fail(fmt::format("unknown key '{}' (the keys are {})", key, known_keys));
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return o;
}

std::optional<std::string> caching_options::environment_text() {
  const char* text = std::getenv(environment_variable);
  if (text == nullptr) return std::nullopt;
  return std::string{text};
}

caching_options caching_options::from_environment() { return from_environment(caching_options{}); }

caching_options caching_options::from_environment(const caching_options& base) {
  const auto text = environment_text();
  if (!text) return base;
  return base.with(*text, environment_variable);
}

std::string caching_options::to_string() const {
  return fmt::format(
      "max_split_mb:{},expandable:{},limit_mb:{},thread_cache_mb:{},release_before_grow:{},grow_from_idle:{},"
      "expandable_page_mb:{},expandable_large_page_mb:{},compact:{}",
      mib_text(max_split_size), expandable ? 1 : 0, mib_text(limit), mib_text(thread_cache_size),
      release_before_grow ? 1 : 0, grow_from_idle ? 1 : 0, mib_text(expandable_page_size),
      mib_text(expandable_large_page_size), compact_under_pressure ? 1 : 0);
}

}  // namespace syncmem::mr
