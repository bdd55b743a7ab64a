#include "report_format.hpp"

#include <cmath>

#include <fmt/format.h>

namespace syncmem::tool {

std::string three_digits(double value) {
  if (!std::isfinite(value)) return "n/a";
  const double magnitude = std::fabs(value);
  if (magnitude >= 100 || magnitude == 0) return fmt::format("{:.0f}", value);
  if (magnitude >= 10) return fmt::format("{:.1f}", value);
  if (magnitude >= 1) return fmt::format("{:.2f}", value);
  // Below 1: three significant digits, e.g. 0.0123.
  const int decimals = 2 - static_cast<int>(std::floor(std::log10(magnitude)));
  return fmt::format("{:.{}f}", value, decimals);
}

std::string format_bandwidth(double bytes_per_second) {
  const double v = bytes_per_second;
  if (v >= 1e12) return three_digits(v / 1e12) + " TB/s";
  if (v >= 1e9) return three_digits(v / 1e9) + " GB/s";
  if (v >= 1e6) return three_digits(v / 1e6) + " MB/s";
  if (v >= 1e3) return three_digits(v / 1e3) + " kB/s";
  return three_digits(v) + " B/s";
}

std::string format_time(double ns) {
  if (ns >= 1e9) return three_digits(ns / 1e9) + " s";
  if (ns >= 1e6) return three_digits(ns / 1e6) + " ms";
  if (ns >= 1e3) return three_digits(ns / 1e3) + " µs";
  return three_digits(ns) + " ns";
}

std::string format_ratio(double ratio) { return three_digits(ratio) + "×"; }

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  return three_digits(v) + " " + units[unit];
}

std::string size_label(double bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  if (bytes == std::floor(bytes)) return fmt::format("{}{}", static_cast<long long>(bytes), units[unit]);
  return three_digits(bytes) + units[unit];
}

std::size_t display_width(std::string_view text) {
  std::size_t n = 0;
  for (const char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;  // not a UTF-8 continuation byte
  }
  return n;
}

std::string pad_right(std::string_view text, std::size_t width) {
  std::string out{text};
  const std::size_t w = display_width(text);
  if (w < width) out.append(width - w, ' ');
  return out;
}

std::string pad_left(std::string_view text, std::size_t width) {
  const std::size_t w = display_width(text);
  std::string out = w < width ? std::string(width - w, ' ') : std::string{};
  out += text;
  return out;
}

std::string counted(std::uint64_t count, std::string_view noun) {
  return fmt::format("{} {}{}", count, noun, count == 1 ? "" : "s");
}

}  // namespace syncmem::tool
