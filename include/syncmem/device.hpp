#pragma once

/// @file device.hpp
/// @brief Enumerating devices, the current device, and what each device is.
///
/// Devices come in two kinds (see device_id.hpp). CUDA devices are what the
/// CUDA runtime reports; a build without CUDA, or a machine without a GPU, has
/// none. Emulated devices exist only when enabled (emulated.hpp). A build or
/// machine with neither has `device_count() == 0`, and any device access
/// throws syncmem::unsupported_error.
///
/// Thread safety: all functions may be called from any thread. The current
/// device is per thread, as in the CUDA runtime.

#include <cstddef>
#include <string>
#include <vector>

#include "syncmem/device_id.hpp"

namespace syncmem {

/// @brief Number of devices of every kind.
[[nodiscard]] int device_count() noexcept;
/// @brief Number of devices of one kind (0 when that backend is absent or finds none).
[[nodiscard]] int device_count(device_kind kind) noexcept;
/// @brief Every device, CUDA ones first.
[[nodiscard]] std::vector<device_id> devices();
/// @brief Why there are no devices of `kind`, or an empty string when there are.
[[nodiscard]] std::string why_no_devices(device_kind kind);

/// @brief Throws syncmem::logic_error naming the valid range unless `id`
/// names an existing device; syncmem::unsupported_error when its kind has no
/// devices at all.
void check_device(device_id id);

/// @brief The calling thread's current device: the one last selected on this
/// thread, else CUDA's current device, else emulated device 0.
/// @throws syncmem::unsupported_error when there is no device at all.
[[nodiscard]] device_id current_device();

/// @brief Makes `id` the calling thread's current device (cudaSetDevice for a
/// CUDA device). Prefer device_guard, which restores the previous one.
/// @throws syncmem::logic_error for an invalid id.
void set_current_device(device_id id);

/// @brief What a device is.
struct device_properties {
  device_id id{device_kind::emulated, 0};
  std::string name;
  std::size_t total_memory = 0;      ///< bytes
  int compute_capability_major = 0;  ///< 0 for emulated devices
  int compute_capability_minor = 0;
  int multiprocessors = 0;
  int async_engines = 0;                 ///< copy engines that overlap with compute
  std::string pci_bus_id;                ///< "0000:3b:00.0", empty when unknown
  int pcie_generation = 0;               ///< current link generation, 0 when unknown
  int pcie_width = 0;                    ///< current link width (lanes), 0 when unknown
  bool supports_virtual_memory = false;  ///< growable segments can be used
  /// @brief The link to the host in words: "PCIe Gen5 x16", "host memory".
  [[nodiscard]] std::string link() const;
};

/// @brief The properties of `id`.
/// @throws syncmem::logic_error for an invalid id.
[[nodiscard]] device_properties get_device_properties(device_id id);

/// @brief Free and total memory of a device, as its driver reports it.
struct memory_info {
  std::size_t free = 0;
  std::size_t total = 0;
};

/// @brief Free and total memory of `id`.
[[nodiscard]] memory_info get_memory_info(device_id id);

/// @brief Waits until all work on every stream of `id` has completed.
void synchronize_device(device_id id);

}  // namespace syncmem
