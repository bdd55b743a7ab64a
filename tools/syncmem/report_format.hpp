#pragma once

// Figures for people, shared by the table, the pages and the plots: three
// significant digits and a unit that keeps the number between 1 and 1000.

#include <cstdint>
#include <string>
#include <string_view>

namespace syncmem::tool {

// 1234.5 -> "1.23e+03" never: "1235", 12.345 -> "12.3", 0.012345 -> "0.0123".
[[nodiscard]] std::string three_digits(double value);
// Bytes per second in decimal units, as bus speeds are quoted: "54.0 GB/s", "812 MB/s".
[[nodiscard]] std::string format_bandwidth(double bytes_per_second);
// A duration given in nanoseconds: "412 ns", "1.23 µs", "45.6 ms", "2.10 s".
[[nodiscard]] std::string format_time(double ns);
// How many times faster: "1.23×", "0.150×", "123×".
[[nodiscard]] std::string format_ratio(double ratio);
// A byte count in binary units: "512 B", "2.00 MiB".
[[nodiscard]] std::string format_bytes(std::uint64_t bytes);
// A size as benchmark names write it: "512B", "4KiB", "1GiB" (three digits
// and the largest binary unit when it is not a whole number of them).
[[nodiscard]] std::string size_label(double bytes);
// The number of characters a terminal shows for UTF-8 text (one per code point).
[[nodiscard]] std::size_t display_width(std::string_view text);
// `text` padded with spaces to `width` columns, on the right (left-aligned) or the left.
[[nodiscard]] std::string pad_right(std::string_view text, std::size_t width);
[[nodiscard]] std::string pad_left(std::string_view text, std::size_t width);
// A count and its noun, plural unless the count is 1: "1 block", "3 blocks".
[[nodiscard]] std::string counted(std::uint64_t count, std::string_view noun);

}  // namespace syncmem::tool
