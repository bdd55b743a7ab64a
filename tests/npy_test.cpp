// ctest-labels: threaded
// .npy: files numpy wrote (tests/data/npy, see generate.py there) load with
// the right dtype, shape and values, and what syncmem writes is byte for byte
// what numpy writes; round trips for every dtype, shape (0-d and empty too)
// and format version on every device kind; each kind of malformed input gives
// an npy_error naming the problem; and, where a python3 with numpy exists,
// numpy reads back what syncmem wrote.
#include "syncmem/npy.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "device_ops.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

namespace fs = std::filesystem;

fs::path fixture_dir() {
  if (const char* dir = std::getenv("SYNCMEM_TEST_DATA")) return fs::path{dir} / "npy";
  return fs::path{SYNCMEM_TEST_DATA_DIR} / "npy";
}

std::vector<std::byte> read_file(const fs::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::vector<char> chars{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
  std::vector<std::byte> bytes(chars.size());
  if (!chars.empty()) std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

std::vector<std::byte> to_bytes(std::string_view text) {
  std::vector<std::byte> out(text.size());
  if (!text.empty()) std::memcpy(out.data(), text.data(), text.size());
  return out;
}

// A temporary directory, removed with its contents.
class temp_dir {
 public:
  temp_dir() : path_{fs::temp_directory_path() / fmt::format("syncmem-npy-{}-{}", ::getpid(), test::fresh_seed())} {
    fs::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// ---- the fixtures' contents (tests/data/npy/npy_fixtures.py computes the same) ----

const std::vector<std::pair<std::string, shape>>& fixture_shapes() {
  static const std::vector<std::pair<std::string, shape>> shapes = {
      {"scalar", shape{}}, {"empty", shape{0}}, {"5", shape{5}}, {"2x3x4", shape{2, 3, 4}}, {"3x0x2", shape{3, 0, 2}}};
  return shapes;
}

const std::vector<dtype>& numpy_dtypes() {
  static const std::vector<dtype> types = {dtype::bool_, dtype::int8,    dtype::uint8,   dtype::int16,  dtype::int32,
                                           dtype::int64, dtype::float16, dtype::float32, dtype::float64};
  return types;
}

template <class T>
void append(std::vector<std::byte>& out, T value) {
  const auto at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

// The bytes of elements 0..count-1 of a fixture of `type`, in C order.
std::vector<std::byte> fixture_bytes(dtype type, std::int64_t count) {
  std::vector<std::byte> out;
  for (std::int64_t i = 0; i < count; ++i) {
    switch (type) {
      case dtype::bool_:
        append(out, static_cast<std::uint8_t>(i % 3 == 0 ? 1 : 0));
        break;
      case dtype::int8:
        append(out, static_cast<std::int8_t>(i * 5 - 60));
        break;
      case dtype::uint8:
        append(out, static_cast<std::uint8_t>(i * 10 + 3));
        break;
      case dtype::int16:
        append(out, static_cast<std::int16_t>(i * 1000 - 12000));
        break;
      case dtype::int32:
        append(out, static_cast<std::int32_t>(i * 100000 - 1000000));
        break;
      case dtype::int64:
        append(out, static_cast<std::int64_t>(i * 10000000000LL - (std::int64_t{1} << 40)));
        break;
      case dtype::float16:
        append(out, float16{static_cast<float>(i) * 0.25F - 2.0F});
        break;
      case dtype::bfloat16:
        append(out, bfloat16{static_cast<float>(i)});
        break;
      case dtype::float32:
        append(out, static_cast<float>(i) * 0.5F - 3.25F);
        break;
      case dtype::float64:
        append(out, static_cast<double>(i) * 0.1 - 1.0);
        break;
    }
  }
  return out;
}

std::vector<std::byte> host_bytes(const tensor& t) {
  std::vector<std::byte> out(t.nbytes());
  if (!out.empty()) std::memcpy(out.data(), t.host_data(), out.size());
  return out;
}

// A fixture tensor on `device` whose newest contents are on its device side.
tensor fixture_tensor(dtype type, const shape& s, device_id device) {
  tensor t{type, s, device};
  const auto bytes = fixture_bytes(type, s.count());
  if (!bytes.empty()) {
    tensor staging{type, s, device};
    std::memcpy(staging.mutable_host_data(), bytes.data(), bytes.size());
    (void)t.mutable_device_data();
    t.copy_from(staging);
  }
  return t;
}

// An .npy file with this header dictionary text (padded as numpy pads) and data.
std::vector<std::byte> make_npy(std::string_view dictionary, std::size_t data_bytes, int major = 1) {
  std::string header{dictionary};
  const std::size_t prefix = major == 1 ? 10 : 12;
  header.append(64 - (prefix + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string file = "\x93NUMPY";
  file += static_cast<char>(major);
  file += '\0';
  for (std::size_t i = 0; i < prefix - 8; ++i) file += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  file += header;
  file.append(data_bytes, '\x01');
  return to_bytes(file);
}

std::string error_of(auto&& action) {
  try {
    action();
  } catch (const npy_error& e) {
    return e.what();
  }
  return "no npy_error";
}

template <class Kind>
class Npy : public test::device_test<Kind> {};
TYPED_TEST_SUITE(Npy, test::device_kinds, test::device_kind_names);

// ---- numpy's files ---------------------------------------------------------------------

TYPED_TEST(Npy, LoadsEveryFileNumpyWrote) {
  ASSERT_TRUE(fs::exists(fixture_dir())) << fixture_dir();
  for (dtype type : numpy_dtypes()) {
    for (const auto& [name, s] : fixture_shapes()) {
      const std::string file = fmt::format("{}_{}.npy", to_string(type), name);
      SCOPED_TRACE(file);
      const tensor t = load_npy(fixture_dir() / file, this->dev());
      EXPECT_EQ(t.dtype(), type);
      EXPECT_EQ(t.shape(), s);
      EXPECT_EQ(t.device(), this->dev());
      EXPECT_EQ(t.label(), file);
      EXPECT_EQ(host_bytes(t), fixture_bytes(type, s.count()));
      const auto header = parse_npy_header(read_file(fixture_dir() / file));
      EXPECT_EQ(header.major_version, 1);
      EXPECT_EQ(header.data_offset % 64, 0U);
      // From memory too.
      EXPECT_EQ(host_bytes(from_npy(read_file(fixture_dir() / file), this->dev())), fixture_bytes(type, s.count()));
    }
  }
}

TYPED_TEST(Npy, LoadsFortranOrderIntoCOrderAndVersions2And3) {
  const tensor f = load_npy(fixture_dir() / "fortran_float64_2x3x4.npy", this->dev());
  EXPECT_EQ(f.shape(), (shape{2, 3, 4}));
  EXPECT_EQ(host_bytes(f), fixture_bytes(dtype::float64, 24));
  const tensor g = load_npy(fixture_dir() / "fortran_int16_3x4.npy", this->dev());
  EXPECT_EQ(host_bytes(g), fixture_bytes(dtype::int16, 12));
  EXPECT_TRUE(parse_npy_header(read_file(fixture_dir() / "fortran_int16_3x4.npy")).fortran_order);
  EXPECT_EQ(host_bytes(from_npy(read_file(fixture_dir() / "fortran_int16_3x4.npy"), this->dev())),
            fixture_bytes(dtype::int16, 12));

  const tensor v2 = load_npy(fixture_dir() / "v2_float32_2x3x4.npy", this->dev());
  EXPECT_EQ(host_bytes(v2), fixture_bytes(dtype::float32, 24));
  EXPECT_EQ(parse_npy_header(read_file(fixture_dir() / "v2_float32_2x3x4.npy")).major_version, 2);
  const tensor v3 = load_npy(fixture_dir() / "v3_int16_2x3x4.npy", this->dev());
  EXPECT_EQ(host_bytes(v3), fixture_bytes(dtype::int16, 24));
  EXPECT_EQ(parse_npy_header(read_file(fixture_dir() / "v3_int16_2x3x4.npy")).major_version, 3);
}

TEST(NpyFiles, WhatNumpyWritesButSyncmemRefusesIsNamed) {
  const device_id d = device_id::emulated(0);
  const std::map<std::string, std::string> expected = {
      {"bad_bigendian_float32_5.npy", "big-endian data (dtype '>f4') is not supported"},
      {"bad_uint16_5.npy", "unsupported dtype '<u2'"},
      {"bad_complex64_5.npy", "unsupported dtype '<c8'"},
      {"bad_structured_5.npy", "structured dtypes are not supported"},
  };
  for (const auto& [file, message] : expected) {
    const fs::path path = fixture_dir() / file;
    const std::string e = error_of([&] { (void)load_npy(path, d); });
    EXPECT_THAT(e, HasSubstr(message)) << file;
    EXPECT_THAT(e, HasSubstr(path.string())) << file;  // the message names the file
  }
}

TEST(NpyFiles, WritesTheSameBytesAsNumpy) {
  const device_id d = device_id::emulated(0);
  for (dtype type : numpy_dtypes()) {
    for (const auto& [name, s] : fixture_shapes()) {
      const std::string file = fmt::format("{}_{}.npy", to_string(type), name);
      const tensor t = fixture_tensor(type, s, d);
      EXPECT_EQ(to_npy(t), read_file(fixture_dir() / file)) << file;
    }
  }
  // Versions 2.0 and 3.0 as numpy writes them.
  EXPECT_EQ(to_npy(fixture_tensor(dtype::float32, {2, 3, 4}, d), {.version = 2}),
            read_file(fixture_dir() / "v2_float32_2x3x4.npy"));
  EXPECT_EQ(to_npy(fixture_tensor(dtype::int16, {2, 3, 4}, d), {.version = 3}),
            read_file(fixture_dir() / "v3_int16_2x3x4.npy"));
}

// ---- round trips -------------------------------------------------------------------------

TYPED_TEST(Npy, RoundTripsEveryDtypeShapeAndVersionThroughFiles) {
  temp_dir dir;
  const device_id target = this->dev(this->count() - 1);
  for (dtype type : numpy_dtypes()) {
    for (const auto& [name, s] : fixture_shapes()) {
      for (int version : {1, 2, 3}) {
        const tensor t = fixture_tensor(type, s, this->dev());
        const fs::path path = dir.path() / fmt::format("{}_{}_v{}.npy", to_string(type), name, version);
        save_npy(path, t, {.version = version});
        const tensor back = load_npy(path, target);
        EXPECT_EQ(back.dtype(), type);
        EXPECT_EQ(back.shape(), s);
        EXPECT_EQ(back.device(), target);
        EXPECT_EQ(host_bytes(back), fixture_bytes(type, s.count())) << path;
        EXPECT_EQ(parse_npy_header(read_file(path)).major_version, version);
      }
    }
  }
  // Nothing but the finished files is left behind.
  for (const auto& entry : fs::directory_iterator{dir.path()}) {
    EXPECT_EQ(entry.path().extension(), ".npy") << entry.path();
  }
}

TYPED_TEST(Npy, SavesViewsAndRandomContents) {
  tensor t{dtype::float32, {10, 7}, this->dev()};
  stream s{this->dev()};
  test::device_fill_pattern(s, t.mutable_device_data(s), t.nbytes(), test::fresh_seed());
  const tensor rows = t.slice(3, 8);
  const tensor back = from_npy(to_npy(rows), this->dev());
  EXPECT_EQ(back.shape(), (shape{5, 7}));
  EXPECT_EQ(host_bytes(back), host_bytes(rows));
}

TEST(NpyFiles, RefusesWhatNpyCannotHold) {
  const device_id d = device_id::emulated(0);
  tensor b{dtype::bfloat16, {3}, d};
  EXPECT_THAT(error_of([&] { (void)to_npy(b); }), HasSubstr(".npy has no bfloat16 type"));
  EXPECT_THAT(error_of([&] { (void)to_npy(tensor{}); }), HasSubstr("a tensor without storage"));
  EXPECT_THAT(error_of([&] {
                (void)to_npy(tensor{dtype::int8, {2}, d}, {.version = 4});
              }),
              HasSubstr("npy_options::version is 4"));
  temp_dir dir;
  EXPECT_THAT(error_of([&] { save_npy(dir.path() / "b.npy", b); }), HasSubstr("save_npy"));
  EXPECT_FALSE(fs::exists(dir.path() / "b.npy"));
}

TEST(NpyFiles, FileErrorsAreSystemErrorsNamingThePath) {
  const device_id d = device_id::emulated(0);
  temp_dir dir;
  const fs::path missing = dir.path() / "missing.npy";
  try {
    (void)load_npy(missing, d);
    FAIL() << "no error";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    EXPECT_THAT(e.what(), HasSubstr(missing.string()));
  }
  const fs::path nowhere = dir.path() / "no" / "such" / "dir.npy";
  EXPECT_THROW(save_npy(nowhere, tensor{dtype::int8, {2}, d}), std::system_error);
  // A file that shrinks to nothing, or a directory.
  std::ofstream{dir.path() / "empty.npy"};
  EXPECT_THAT(error_of([&] { (void)load_npy(dir.path() / "empty.npy", d); }), HasSubstr("truncated: 0 bytes"));
}

// ---- malformed input -----------------------------------------------------------------------

TEST(NpyParse, EachMalformationIsNamed) {
  const device_id d = device_id::emulated(0);
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  struct bad_case {
    std::vector<std::byte> bytes;
    std::string message;
  };
  std::vector<bad_case> cases = {
      {to_bytes(""), "truncated: 0 bytes"},
      {to_bytes("GIF89a..........."), "not an .npy file: it does not start with the magic string"},
      {to_bytes("\x93NUM"), "truncated: 4 bytes"},
      {to_bytes(std::string{"\x93NUMPY\x04\x00", 8} + "xxxx"), "format version 4.0 is not supported"},
      {to_bytes(std::string{"\x93NUMPY\x01\x01", 8} + "xxxx"), "format version 1.1 is not supported"},
      {to_bytes(std::string{"\x93NUMPY\x01\x00\x10", 9}), "truncated: 9 bytes; a version 1.0 file needs 10 bytes"},
      {to_bytes(std::string{"\x93NUMPY\x01\x00\xC8\x00", 10} + "{'descr'"), "truncated header: it should be 200 bytes"},
      {to_bytes(std::string{"\x93NUMPY\x02\x00\xFF\xFF\xFF\x7F", 12}),
       "the header length 2147483647 exceeds the limit"},
      {make_npy("[1, 2]", 0), "the header must be a dictionary"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'foo': 1}", 8), "unknown key 'foo'"},
      {make_npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8),
       "the key 'descr' appears twice"},
      {make_npy("{'descr': '<f4', 'fortran_order': False}", 8), "the header has no 'shape'"},
      {make_npy("{'shape': (2,), 'fortran_order': False}", 8), "the header has no 'descr'"},
      {make_npy("{'descr': '<f4', 'shape': (2,)}", 8), "the header has no 'fortran_order'"},
      {make_npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", 8), "must be True or False"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", 8), "a negative extent"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", 8), "'shape' (n) is not a tuple"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", 8), "'shape' must be a tuple"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3.5)}", 8), "expected ',' or ')'"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776)}", 0),
       "overflows a 64-bit integer"},
      {make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,)}", 0),
       "exceeds the largest buffer"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 0),
       "does not fit in a 64-bit integer"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000,)}", 16),
       "truncated data: the header promises 4000000000 bytes (float32 (1000000000)), 16 are present"},
      {make_npy(ok_dict, 9), "1 bytes of unexpected data after the array's 8 bytes"},
      {make_npy("{'descr': '=f4', 'fortran_order': False, 'shape': (2,)}", 8), "native byte order"},
      {make_npy("{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}", 8), "is multi-byte but has no byte order"},
      {make_npy("{'descr': 'f4', 'fortran_order': False, 'shape': (2,)}", 8), "unsupported dtype 'f4'"},
      {make_npy("{'descr': '<U5', 'fortran_order': False, 'shape': (2,)}", 40), "unsupported dtype '<U5'"},
      {make_npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,)}", 16), "unsupported dtype '|O'"},
      {make_npy("{'descr': '<f4\\n', 'fortran_order': False, 'shape': (2,)}", 8), "escape sequences"},
      {make_npy("{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", 8), "expected ':' after the key 'descr'"},
      {make_npy(ok_dict + " x", 8), "unexpected text after the header dictionary: 'x"},
      {make_npy("{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", 8), "expected ',' or '}'"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8), "is not closed with '}'"},
  };
  std::string many = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < 33; ++i) many += "1, ";
  cases.push_back({make_npy(many + ")}", 4), "'shape' has more than 32 axes"});
  for (const auto& c : cases) {
    const std::string e = error_of([&] { (void)from_npy(c.bytes, d); });
    EXPECT_THAT(e, HasSubstr(c.message));
    EXPECT_THAT(e, HasSubstr("syncmem: npy: "));
  }
}

TEST(NpyParse, AcceptsWhatPythonWouldReadAsTheSameHeader) {
  const device_id d = device_id::emulated(0);
  // Double quotes, other spacing, no trailing commas, Python 2's long suffix, keys in any order.
  const auto t = from_npy(make_npy("{\"shape\":(3L,2L),\"descr\":\"<i2\",\"fortran_order\":False}", 12), d);
  EXPECT_EQ(t.shape(), (shape{3, 2}));
  EXPECT_EQ(t.dtype(), dtype::int16);
  const auto scalar = from_npy(make_npy("{'descr': '<f8', 'fortran_order': True, 'shape': ( ), }", 8), d);
  EXPECT_EQ(scalar.shape(), shape{});
  // '>' and '=' are fine for one-byte types.
  EXPECT_EQ(from_npy(make_npy("{'descr': '>u1', 'fortran_order': False, 'shape': (4,)}", 4), d).dtype(), dtype::uint8);
  // numpy reads any nonzero bool byte as true; a C++ bool must be 0 or 1.
  auto bools = make_npy("{'descr': '|b1', 'fortran_order': False, 'shape': (4,)}", 4);
  bools[bools.size() - 4] = std::byte{0};
  bools[bools.size() - 3] = std::byte{2};
  bools[bools.size() - 2] = std::byte{255};
  const auto b = from_npy(bools, d);
  const bool* p = b.host_data<bool>();
  EXPECT_EQ(std::vector<bool>(p, p + 4), (std::vector<bool>{false, true, true, true}));
}

TEST(NpyParse, NumpyTypestrIsWhatTheHeaderParserReadsBack) {
  for (const dtype t : all_dtypes) {
    const char* typestr = numpy_typestr(t);
    if (t == dtype::bfloat16) {
      EXPECT_EQ(typestr, nullptr);
      continue;
    }
    ASSERT_NE(typestr, nullptr) << to_string(t);
    const std::string dictionary = "{'descr': '" + std::string{typestr} + "', 'fortran_order': False, 'shape': (3,)}";
    const auto header = parse_npy_header(make_npy(dictionary, 3 * size_of(t)));
    EXPECT_EQ(header.type, t) << typestr;
  }
}

TEST(NpyParse, EveryTruncationOfAValidFileIsRefused) {
  const device_id d = device_id::emulated(0);
  for (const char* file : {"float32_2x3x4.npy", "v2_float32_2x3x4.npy", "int64_scalar.npy"}) {
    const auto bytes = read_file(fixture_dir() / file);
    ASSERT_FALSE(bytes.empty());
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      const std::span<const std::byte> prefix{bytes.data(), n};
      EXPECT_THAT(error_of([&] { (void)from_npy(prefix, d); }), HasSubstr("truncated")) << file << " " << n;
    }
    EXPECT_NO_THROW((void)from_npy(bytes, d));
  }
}

// A small in-test fuzzer: random byte changes to valid files either load or
// give an npy_error; nothing else escapes (the libFuzzer target in fuzz/ goes further).
TEST(NpyParse, RandomCorruptionsLoadOrFailCleanly) {
  const device_id d = device_id::emulated(0);
  std::vector<std::vector<std::byte>> seeds;
  for (const char* file : {"float16_2x3x4.npy", "bool_5.npy", "fortran_float64_2x3x4.npy", "v3_int16_2x3x4.npy"}) {
    seeds.push_back(read_file(fixture_dir() / file));
  }
  auto& rng = test::rng();
  int loaded = 0;
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    auto bytes = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const auto at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<std::byte>(rng());
          break;
        case 1:
          bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(at));
          break;
        default:
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::byte>(rng()));
          break;
      }
      if (bytes.empty()) bytes.push_back(std::byte{0});
    }
    try {
      const tensor t = from_npy(bytes, d);
      ++loaded;
      ASSERT_EQ(from_npy(to_npy(t), d).nbytes(), t.nbytes());
    } catch (const npy_error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(loaded, 0);
}

// ---- numpy reads what syncmem writes ---------------------------------------------------------

// A python3 that can import numpy: SYNCMEM_PYTHON, Debian's /usr/bin/python3,
// or the python3 first on PATH.
std::string find_python_with_numpy() {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("SYNCMEM_PYTHON")) candidates.emplace_back(p);
  candidates.emplace_back("/usr/bin/python3");
  candidates.emplace_back("python3");
  for (const auto& python : candidates) {
    const std::string probe = fmt::format("'{}' -c 'import numpy' >/dev/null 2>&1", python);
    if (std::system(probe.c_str()) == 0) return python;
  }
  return {};
}

TEST(NpyNumpy, NumpyReadsWhatSyncmemWrote) {
  const std::string python = find_python_with_numpy();
  if (python.empty()) {
    GTEST_SKIP() << "no python3 with numpy found (tried $SYNCMEM_PYTHON, /usr/bin/python3, python3 on PATH): numpy "
                    "cannot check the files syncmem writes on this machine";
  }
  const device_id d = device_id::emulated(0);
  temp_dir dir;
  int written = 0;
  for (dtype type : numpy_dtypes()) {
    for (const auto& [name, s] : fixture_shapes()) {
      for (int version : {1, 2, 3}) {
        save_npy(dir.path() / fmt::format("{}_{}_v{}.npy", to_string(type), name, version), fixture_tensor(type, s, d),
                 {.version = version});
        ++written;
      }
    }
  }
  const std::string command =
      fmt::format("'{}' '{}' '{}' 2>&1", python, (fixture_dir() / "check_written.py").string(), dir.path().string());
  std::FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  const int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(static_cast<int>(std::count(output.begin(), output.end(), '\n')), written) << output;
  EXPECT_THAT(output, ::testing::Not(HasSubstr("MISMATCH")));
}

}  // namespace
}  // namespace syncmem
