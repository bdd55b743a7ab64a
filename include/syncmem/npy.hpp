#pragma once

/// @file npy.hpp
/// @brief numpy's .npy format: save tensors of any device to files or bytes,
/// and load them onto any device.
///
/// What is supported: format versions 1.0, 2.0 and 3.0; little-endian data
/// (descr `<`, or `|` for one-byte types); the dtypes bool (`|b1`), int8,
/// uint8, int16, int32, int64, float16, float32 and float64; C order, and
/// Fortran order on loading (the elements are reordered into C order); 0 to
/// 32 axes, 0-d and empty arrays included. What is refused, with an npy_error
/// naming the problem: a bad magic string, another version, a truncated file
/// or header, a malformed header dictionary (only the three keys numpy writes,
/// each once), dtypes outside the list above (structured, unsigned wider
/// than a byte, complex, strings, objects), big-endian or native (`=`) byte
/// order for multi-byte types, a negative extent, more than 32 axes, a count
/// or byte size that overflows, data shorter or longer than the header says.
/// bfloat16 tensors cannot be saved (numpy has no bfloat16).
///
/// Loading is strict and safe for untrusted input: nothing is allocated
/// before the header has been checked against the size of the input, and a
/// load that fails returns nothing half-done. A bool byte other than 0 reads
/// as true (1).

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "syncmem/device_id.hpp"
#include "syncmem/dtype.hpp"
#include "syncmem/error.hpp"
#include "syncmem/shape.hpp"
#include "syncmem/synced_memory.hpp"
#include "syncmem/tensor.hpp"

namespace syncmem {

/// @brief A malformed, truncated or unsupported .npy file, or a tensor .npy
/// cannot hold. The message says what is wrong and where (the file's path).
class npy_error : public logic_error {
 public:
  explicit npy_error(const std::string& message) : logic_error{message} {}
};

/// @brief What an .npy header says.
struct npy_header {
  syncmem::dtype type = syncmem::dtype::float32;
  syncmem::shape shape;
  bool fortran_order = false;
  int major_version = 1;
  int minor_version = 0;
  std::size_t data_offset = 0;  ///< bytes from the start of the file to the data
  std::size_t data_bytes = 0;   ///< count × itemsize
};

/// @brief How to write.
struct npy_options {
  /// @brief Format version 1, 2 or 3; 0 picks numpy's choice: 1.0, or 2.0 when
  /// the header does not fit 1.0 (never, with at most 32 axes).
  int version = 0;
};

/// @brief numpy's type string for `type` (its `dtype.str`, little-endian:
/// "<f4", "|b1", ...), as .npy headers and `__array_interface__` /
/// `__cuda_array_interface__` write it; nullptr for bfloat16, which numpy lacks.
[[nodiscard]] const char* numpy_typestr(dtype type) noexcept;

/// @brief Parses and checks the magic string, version and header dictionary at
/// the start of `bytes` (which need not hold the data).
/// @throws syncmem::npy_error
[[nodiscard]] npy_header parse_npy_header(std::span<const std::byte> bytes);

/// @brief A tensor on `device` holding the .npy file in `bytes`, which must be
/// the whole file: header and data, nothing after.
/// @throws syncmem::npy_error for bad input; syncmem::out_of_memory
[[nodiscard]] tensor from_npy(std::span<const std::byte> bytes, device_id device, synced_memory_options options = {});

/// @brief The .npy file of `t` (C order), wherever its newest contents are.
/// @throws syncmem::npy_error for a bfloat16 tensor or a bad version
[[nodiscard]] std::vector<std::byte> to_npy(const tensor& t, npy_options options = {});

/// @brief Writes `t` to `path` as an .npy file. The file is written under a
/// temporary name and renamed into place, so that `path` never holds half a file.
/// @throws syncmem::npy_error as to_npy; std::system_error when the file cannot be written
void save_npy(const std::filesystem::path& path, const tensor& t, npy_options options = {});

/// @brief Loads the .npy file at `path` onto `device`. The tensor's label is
/// options.label, or the file's name when that is empty.
/// @throws syncmem::npy_error for bad contents (the message names the file);
/// std::system_error when the file cannot be read; syncmem::out_of_memory
[[nodiscard]] tensor load_npy(const std::filesystem::path& path, device_id device, synced_memory_options options = {});
/// @brief load_npy onto the current device.
[[nodiscard]] tensor load_npy(const std::filesystem::path& path);

}  // namespace syncmem
