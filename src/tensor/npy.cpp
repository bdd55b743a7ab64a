#include "syncmem/npy.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "syncmem/device.hpp"

namespace syncmem {

namespace {

constexpr std::array<unsigned char, 6> magic = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// A header larger than this is refused before it is read: numpy's own
// headers are a few hundred bytes, and the bound keeps a hostile length from
// costing memory.
constexpr std::size_t max_header_bytes = std::size_t{1} << 20;

[[noreturn]] void fail(std::string_view context, std::string_view problem) {
  throw npy_error{fmt::format("syncmem: {}: {}", context, problem)};
}

// What an input shows of itself in a message: printable ASCII, the rest escaped.
std::string printable(std::string_view text, std::size_t limit = 40) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

// ---- the header dictionary: a small, strict subset of Python literals --------

class header_parser {
 public:
  header_parser(std::string_view text, std::string_view context) : text_{text}, context_{context} {}

  npy_header parse() {
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<std::vector<std::int64_t>> extents;
    skip_space();
    expect('{', "the header must be a dictionary starting with '{'");
    skip_space();
    while (!at_end() && peek() != '}') {
      const std::string key = parse_string("a dictionary key");
      skip_space();
      expect(':', fmt::format("expected ':' after the key '{}'", printable(key)));
      skip_space();
      if (key == "descr") {
        if (descr) problem("the key 'descr' appears twice");
        descr = parse_string("the value of 'descr' (a dtype string; structured dtypes are not supported)");
      } else if (key == "fortran_order") {
        if (fortran) problem("the key 'fortran_order' appears twice");
        fortran = parse_bool();
      } else if (key == "shape") {
        if (extents) problem("the key 'shape' appears twice");
        extents = parse_shape();
      } else {
        problem(fmt::format("unknown key '{}' in the header (only 'descr', 'fortran_order' and 'shape' are allowed)",
                            printable(key)));
      }
      skip_space();
      if (!at_end() && peek() == ',') {
        ++pos_;
        skip_space();
      } else if (!at_end() && peek() != '}') {
        problem("expected ',' or '}' after a value in the header dictionary");
      }
    }
    expect('}', "the header dictionary is not closed with '}'");
    skip_space();
    if (!at_end()) {
      problem(fmt::format("unexpected text after the header dictionary: '{}'", printable(text_.substr(pos_))));
    }
    if (!descr) problem("the header has no 'descr'");
    if (!fortran) problem("the header has no 'fortran_order'");
    if (!extents) problem("the header has no 'shape'");

    npy_header header;
    header.type = parse_descr(*descr);
    header.fortran_order = *fortran;
    header.shape = checked_shape(*extents, header.type);
    return header;
  }

 private:
  [[noreturn]] void problem(std::string_view what) const {
    fail(context_, fmt::format("malformed header at byte {} of the dictionary: {}", pos_, what));
  }

  [[nodiscard]] bool at_end() const { return pos_ >= text_.size(); }
  [[nodiscard]] char peek() const { return text_[pos_]; }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }

  void expect(char c, std::string_view otherwise) {
    if (at_end() || peek() != c) problem(otherwise);
    ++pos_;
  }

  std::string parse_string(std::string_view what) {
    if (at_end() || (peek() != '\'' && peek() != '"')) problem(fmt::format("expected a quoted string for {}", what));
    const char quote = text_[pos_++];
    const std::size_t start = pos_;
    while (!at_end() && peek() != quote) {
      if (peek() == '\\') problem("escape sequences in strings are not supported");
      if (peek() == '\n') problem("a string runs past the end of the line");
      ++pos_;
    }
    if (at_end()) problem("a string is not closed");
    std::string value{text_.substr(start, pos_ - start)};
    ++pos_;
    return value;
  }

  bool parse_bool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    problem("the value of 'fortran_order' must be True or False");
  }

  std::int64_t parse_extent() {
    if (!at_end() && peek() == '-') problem("a negative extent in 'shape'; extents must be >= 0");
    if (at_end() || peek() < '0' || peek() > '9') problem("expected a whole number in 'shape'");
    std::int64_t value = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      const int digit = peek() - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) {
        problem("an extent in 'shape' does not fit in a 64-bit integer");
      }
      value = value * 10 + digit;
      ++pos_;
    }
    if (!at_end() && peek() == 'L') ++pos_;  // Python 2's long suffix, in files written by old numpy
    return value;
  }

  std::vector<std::int64_t> parse_shape() {
    if (at_end() || peek() != '(') problem("the value of 'shape' must be a tuple, e.g. (2, 3) or (5,) or ()");
    ++pos_;
    std::vector<std::int64_t> extents;
    bool trailing_comma = false;
    skip_space();
    while (!at_end() && peek() != ')') {
      if (extents.size() == static_cast<std::size_t>(shape::max_axes)) {
        problem(fmt::format("'shape' has more than {} axes", shape::max_axes));
      }
      extents.push_back(parse_extent());
      skip_space();
      trailing_comma = false;
      if (!at_end() && peek() == ',') {
        ++pos_;
        trailing_comma = true;
        skip_space();
      } else if (at_end() || peek() != ')') {
        problem("expected ',' or ')' in 'shape'");
      }
    }
    expect(')', "the 'shape' tuple is not closed with ')'");
    // In Python "(5)" is the number 5, not a tuple; numpy refuses it too.
    if (extents.size() == 1 && !trailing_comma) problem("'shape' (n) is not a tuple; a 1-tuple is written (n,)");
    return extents;
  }

  [[nodiscard]] syncmem::dtype parse_descr(const std::string& descr) const {
    const std::string shown = printable(descr);
    if (descr.size() < 3) fail(context_, fmt::format("unsupported dtype '{}'", shown));
    const char order = descr[0];
    const std::string_view code{descr.data() + 1, descr.size() - 1};
    std::optional<syncmem::dtype> type;
    if (code == "b1") type = syncmem::dtype::bool_;
    if (code == "i1") type = syncmem::dtype::int8;
    if (code == "u1") type = syncmem::dtype::uint8;
    if (code == "i2") type = syncmem::dtype::int16;
    if (code == "i4") type = syncmem::dtype::int32;
    if (code == "i8") type = syncmem::dtype::int64;
    if (code == "f2") type = syncmem::dtype::float16;
    if (code == "f4") type = syncmem::dtype::float32;
    if (code == "f8") type = syncmem::dtype::float64;
    if (order != '<' && order != '>' && order != '|' && order != '=') {
      fail(context_, fmt::format("dtype '{}' has no byte order ('<', '>', '|' or '='); unsupported", shown));
    }
    if (!type) {
      fail(context_, fmt::format("unsupported dtype '{}' (supported: bool |b1, int8 |i1, uint8 |u1, and "
                                 "little-endian <i2 <i4 <i8 <f2 <f4 <f8)",
                                 shown));
    }
    if (size_of(*type) > 1) {
      if (order == '>') fail(context_, fmt::format("big-endian data (dtype '{}') is not supported", shown));
      if (order == '=') {
        fail(context_, fmt::format("dtype '{}' has the writer's native byte order, which the file does not record; "
                                   "only explicit little-endian ('<') data is supported",
                                   shown));
      }
      if (order == '|') fail(context_, fmt::format("dtype '{}' is multi-byte but has no byte order", shown));
    }
    return *type;
  }

  [[nodiscard]] syncmem::shape checked_shape(const std::vector<std::int64_t>& extents, syncmem::dtype type) const {
    // The product of the nonzero extents must fit, as syncmem::shape requires;
    // checked here so that the message is about the file.
    std::int64_t product = 1;
    bool empty = false;
    for (std::int64_t e : extents) {
      if (e == 0) {
        empty = true;
        continue;
      }
      if (product > std::numeric_limits<std::int64_t>::max() / e) {
        fail(context_,
             fmt::format("shape ({}) has an element count that overflows a 64-bit integer", fmt::join(extents, ", ")));
      }
      product *= e;
    }
    const auto count = static_cast<std::uint64_t>(empty ? 0 : product);
    if (count > synced_memory::max_size() / size_of(type)) {
      fail(context_, fmt::format("shape ({}) of {} elements of {} bytes exceeds the largest buffer of {} bytes",
                                 fmt::join(extents, ", "), count, size_of(type), synced_memory::max_size()));
    }
    return syncmem::shape{std::span<const std::int64_t>{extents}};
  }

  std::string_view text_;
  std::string_view context_;
  std::size_t pos_ = 0;
};

std::uint32_t read_le(std::span<const std::byte> bytes, std::size_t offset, std::size_t width) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < width; ++i) value |= static_cast<std::uint32_t>(bytes[offset + i]) << (8 * i);
  return value;
}

// The size of the fixed prefix (magic, version, header length) of a version.
std::size_t prefix_bytes(int major) { return major == 1 ? 10 : 12; }

npy_header parse_header(std::span<const std::byte> bytes, std::string_view context) {
  // Magic first, on what there is, so that a short non-.npy input is called that.
  const std::size_t shown = std::min(bytes.size(), magic.size());
  if (!std::equal(magic.begin(), magic.begin() + static_cast<std::ptrdiff_t>(shown), bytes.begin(),
                  [](unsigned char m, std::byte b) { return m == static_cast<unsigned char>(b); })) {
    fail(context, fmt::format("not an .npy file: it does not start with the magic string \\x93NUMPY (it starts "
                              "with '{}')",
                              printable({reinterpret_cast<const char*>(bytes.data()), shown}, 6)));
  }
  if (bytes.size() < 8) {
    fail(context, fmt::format("truncated: {} bytes; an .npy file starts with 8 bytes of magic string and version",
                              bytes.size()));
  }
  const int major = static_cast<int>(bytes[6]);
  const int minor = static_cast<int>(bytes[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    fail(context, fmt::format("format version {}.{} is not supported (1.0, 2.0 and 3.0 are)", major, minor));
  }
  const std::size_t prefix = prefix_bytes(major);
  if (bytes.size() < prefix) {
    fail(context, fmt::format("truncated: {} bytes; a version {}.0 file needs {} bytes before its header", bytes.size(),
                              major, prefix));
  }
  const std::size_t header_length = read_le(bytes, 8, prefix - 8);
  if (header_length > max_header_bytes) {
    fail(context, fmt::format("the header length {} exceeds the limit of {} bytes", header_length, max_header_bytes));
  }
  if (bytes.size() - prefix < header_length) {
    fail(context,
         fmt::format("truncated header: it should be {} bytes, {} are present", header_length, bytes.size() - prefix));
  }
  const std::string_view text{reinterpret_cast<const char*>(bytes.data() + prefix), header_length};
  npy_header header = header_parser{text, context}.parse();
  header.major_version = major;
  header.minor_version = minor;
  header.data_offset = prefix + header_length;
  header.data_bytes = static_cast<std::size_t>(header.shape.count()) * size_of(header.type);
  return header;
}

void check_data_size(const npy_header& header, std::size_t available, std::string_view context) {
  if (available < header.data_bytes) {
    fail(context, fmt::format("truncated data: the header promises {} bytes ({} {}), {} are present", header.data_bytes,
                              to_string(header.type), header.shape.to_string(), available));
  }
  if (available > header.data_bytes) {
    fail(context, fmt::format("{} bytes of unexpected data after the array's {} bytes", available - header.data_bytes,
                              header.data_bytes));
  }
}

// numpy reads any nonzero byte as true; a C++ bool must hold 0 or 1.
void normalize_bools(std::byte* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] != std::byte{0}) p[i] = std::byte{1};
  }
}

// Writes the elements in `data` (in the file's order) into `out` in C order.
void store_elements(const npy_header& header, const std::byte* data, std::byte* out) {
  const std::size_t itemsize = size_of(header.type);
  const auto count = static_cast<std::size_t>(header.shape.count());
  if (!header.fortran_order || header.shape.num_axes() <= 1) {
    if (header.data_bytes > 0) std::memcpy(out, data, header.data_bytes);
  } else {
    // Walk the C-order indices, last axis fastest, keeping the Fortran-order
    // offset (first axis fastest) of the same element.
    const int axes = header.shape.num_axes();
    std::array<std::size_t, shape::max_axes> index{};
    std::array<std::size_t, shape::max_axes> stride{};  // Fortran strides, in elements
    std::size_t s = 1;
    for (int d = 0; d < axes; ++d) {
      stride[static_cast<std::size_t>(d)] = s;
      s *= static_cast<std::size_t>(header.shape[d]);
    }
    std::size_t source = 0;
    for (std::size_t i = 0; i < count; ++i) {
      std::memcpy(out + i * itemsize, data + source * itemsize, itemsize);
      for (int d = axes - 1; d >= 0; --d) {
        const auto a = static_cast<std::size_t>(d);
        source += stride[a];
        if (++index[a] < static_cast<std::size_t>(header.shape[d])) break;
        source -= index[a] * stride[a];
        index[a] = 0;
      }
    }
  }
  if (header.type == syncmem::dtype::bool_) normalize_bools(out, count);
}

// ---- writing -------------------------------------------------------------------

// The magic string, version, length and header dictionary, padded as numpy
// pads them (the data starts at a multiple of 64 bytes): the same bytes as
// numpy.save writes.
std::string header_of(const tensor& t, npy_options options, std::string_view context) {
  const char* descr = numpy_typestr(t.dtype());
  if (descr == nullptr) {
    fail(context, fmt::format("{}: .npy has no {} type (numpy lacks it); convert the tensor to float32 first",
                              t.to_string(), to_string(t.dtype())));
  }
  if (options.version < 0 || options.version > 3) {
    fail(context,
         fmt::format("npy_options::version is {}; valid versions are 1, 2 and 3 (0 chooses)", options.version));
  }
  const auto extents = t.shape().extents();
  std::string shape_text;
  if (extents.size() == 1) {
    shape_text = fmt::format("({},)", extents[0]);
  } else {
    shape_text = fmt::format("({})", fmt::join(extents, ", "));
  }
  std::string dictionary = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape_text);
  // numpy (since 1.24) leaves room for the first extent to grow to 21 digits,
  // so that a file can be appended to in place; do the same, byte for byte.
  if (!extents.empty()) dictionary.append(21 - std::min<std::size_t>(21, fmt::formatted_size("{}", extents[0])), ' ');
  auto header_length_for = [&](int major) {
    const std::size_t unpadded = prefix_bytes(major) + dictionary.size() + 1;  // + the final '\n'
    return dictionary.size() + (64 - unpadded % 64) + 1;
  };
  int major = options.version;
  if (major == 0) major = header_length_for(1) <= 65535 ? 1 : 2;
  const std::size_t prefix = prefix_bytes(major);
  const std::size_t header_length = header_length_for(major);
  const std::size_t padding = header_length - dictionary.size() - 1;
  if (major == 1 && header_length > 65535) {
    fail(context, fmt::format("the header of {} bytes does not fit format version 1.0", header_length));
  }
  std::string out;
  out.reserve(prefix + header_length);
  for (unsigned char c : magic) out += static_cast<char>(c);
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((header_length >> (8 * i)) & 0xFFU);
  out += dictionary;
  out.append(padding, ' ');
  out += '\n';
  return out;
}

void check_writable(const tensor& t, std::string_view context) {
  if (!t.has_storage()) {
    fail(context, "a tensor without storage has no shape to write (reshape it first)");
  }
}

// A FILE* that is closed when it goes (for reading; writing checks fclose).
struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

[[noreturn]] void fail_io(int error, std::string_view what, const std::filesystem::path& path) {
  throw std::system_error{error, std::generic_category(), fmt::format("syncmem: {} '{}'", what, path.string())};
}

}  // namespace

// ---------------------------------------------------------------------------
// public
// ---------------------------------------------------------------------------

const char* numpy_typestr(dtype type) noexcept {
  switch (type) {
    case syncmem::dtype::bool_:
      return "|b1";
    case syncmem::dtype::int8:
      return "|i1";
    case syncmem::dtype::uint8:
      return "|u1";
    case syncmem::dtype::int16:
      return "<i2";
    case syncmem::dtype::int32:
      return "<i4";
    case syncmem::dtype::int64:
      return "<i8";
    case syncmem::dtype::float16:
      return "<f2";
    case syncmem::dtype::float32:
      return "<f4";
    case syncmem::dtype::float64:
      return "<f8";
    case syncmem::dtype::bfloat16:
      break;
  }
  return nullptr;
}

npy_header parse_npy_header(std::span<const std::byte> bytes) { return parse_header(bytes, "npy"); }

tensor from_npy(std::span<const std::byte> bytes, device_id device, synced_memory_options options) {
  constexpr std::string_view context = "npy";
  const npy_header header = parse_header(bytes, context);
  check_data_size(header, bytes.size() - header.data_offset, context);
  tensor t{header.type, header.shape, device, std::move(options)};
  if (header.data_bytes > 0) {
    store_elements(header, bytes.data() + header.data_offset, static_cast<std::byte*>(t.mutable_host_data()));
  }
  return t;
}

std::vector<std::byte> to_npy(const tensor& t, npy_options options) {
  constexpr std::string_view context = "to_npy";
  check_writable(t, context);
  const std::string header = header_of(t, options, context);
  std::vector<std::byte> out(header.size() + t.nbytes());
  std::memcpy(out.data(), header.data(), header.size());
  if (t.nbytes() > 0) std::memcpy(out.data() + header.size(), t.host_data(), t.nbytes());
  return out;
}

void save_npy(const std::filesystem::path& path, const tensor& t, npy_options options) {
  const std::string context = fmt::format("save_npy '{}'", path.string());
  check_writable(t, context);
  const std::string header = header_of(t, options, context);
  const void* data = t.nbytes() > 0 ? t.host_data() : nullptr;
  // Write beside the target, then rename: readers never see half a file.
  static std::atomic<unsigned> counter{0};
  std::filesystem::path partial = path;
  partial += fmt::format(".{}.{}.partial", ::getpid(), counter.fetch_add(1));
  std::FILE* file = std::fopen(partial.c_str(), "wb");
  if (file == nullptr) fail_io(errno, "save_npy: cannot create", partial);
  errno = 0;
  const bool written = std::fwrite(header.data(), 1, header.size(), file) == header.size() &&
                       (data == nullptr || std::fwrite(data, 1, t.nbytes(), file) == t.nbytes()) &&
                       std::fflush(file) == 0;
  int error = errno;
  const bool closed = std::fclose(file) == 0;
  if (error == 0) error = errno;
  std::error_code ignored;
  if (!written || !closed) {
    std::filesystem::remove(partial, ignored);
    fail_io(error != 0 ? error : EIO, "save_npy: cannot write", partial);
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) {
    std::filesystem::remove(partial, ignored);
    fail_io(ec.value(), "save_npy: cannot rename the written file to", path);
  }
}

tensor load_npy(const std::filesystem::path& path, device_id device, synced_memory_options options) {
  const std::string context = fmt::format("load_npy '{}'", path.string());
  file_ptr file{std::fopen(path.c_str(), "rb")};
  if (!file) fail_io(errno, "load_npy: cannot open", path);
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail_io(ec.value(), "load_npy: cannot read the size of", path);

  // The fixed prefix, then the header it announces (bounded by max_header_bytes).
  std::vector<std::byte> head(std::min<std::uintmax_t>(size, 12));
  if (std::fread(head.data(), 1, head.size(), file.get()) != head.size()) fail_io(EIO, "load_npy: cannot read", path);
  if (head.size() >= 8) {
    const int major = static_cast<int>(head[6]);
    if (major >= 1 && major <= 3 && head.size() >= prefix_bytes(major)) {
      const std::size_t prefix = prefix_bytes(major);
      const std::size_t header_length = read_le(head, 8, prefix - 8);
      const std::size_t wanted = std::min<std::uintmax_t>(size, prefix + std::min(header_length, max_header_bytes + 1));
      const std::size_t have = head.size();
      if (wanted > have) {
        head.resize(wanted);
        if (std::fread(head.data() + have, 1, wanted - have, file.get()) != wanted - have) {
          fail_io(EIO, "load_npy: cannot read", path);
        }
      }
    }
  }
  const npy_header header = parse_header(head, context);
  check_data_size(header, static_cast<std::size_t>(size) - header.data_offset, context);

  if (options.label.empty()) options.label = path.filename().string();
  tensor t{header.type, header.shape, device, std::move(options)};
  if (header.data_bytes == 0) return t;
  if (std::fseek(file.get(), static_cast<long>(header.data_offset), SEEK_SET) != 0) {
    fail_io(errno, "load_npy: cannot seek in", path);
  }
  auto* out = static_cast<std::byte*>(t.mutable_host_data());
  if (!header.fortran_order) {
    if (std::fread(out, 1, header.data_bytes, file.get()) != header.data_bytes) {
      fail(context, "truncated data: the file became shorter while it was read");
    }
    if (header.type == syncmem::dtype::bool_) normalize_bools(out, header.data_bytes);
    return t;
  }
  std::vector<std::byte> data(header.data_bytes);
  if (std::fread(data.data(), 1, data.size(), file.get()) != data.size()) {
    fail(context, "truncated data: the file became shorter while it was read");
  }
  store_elements(header, data.data(), out);
  return t;
}

tensor load_npy(const std::filesystem::path& path) { return load_npy(path, current_device()); }

}  // namespace syncmem
