#pragma once

/// @file memory_kind.hpp
/// @brief What kind of memory a pointer points to.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "syncmem/device_id.hpp"

namespace syncmem {

/// @brief The kinds of memory syncmem moves between.
enum class memory_kind : std::uint8_t {
  pageable_host,  ///< ordinary host memory (malloc, new, the stack)
  pinned_host,    ///< page-locked host memory (cudaHostAlloc, cudaHostRegister, or emulated pinned)
  device,         ///< memory of one device
  managed,        ///< CUDA managed (unified) memory
};

/// @brief "pageable", "pinned", "device", "managed".
[[nodiscard]] std::string to_string(memory_kind kind);

/// @brief What is known of a pointer.
struct pointer_attributes {
  memory_kind kind = memory_kind::pageable_host;
  /// @brief The device of device memory; for pinned and managed memory the
  /// device it was registered with, when known.
  std::optional<device_id> device;
  /// @brief Start and size of the allocation holding the pointer, when known
  /// (size 0 when not: pageable memory, say).
  const void* base = nullptr;
  std::size_t size = 0;
};

/// @brief Classifies `p`: emulated devices' allocations and pinned memory are
/// known exactly; for CUDA the runtime is asked; anything else is pageable.
[[nodiscard]] pointer_attributes get_pointer_attributes(const void* p);

}  // namespace syncmem
