#pragma once

/// @file emulated.hpp
/// @brief Emulated devices: devices made of host memory, for developing and
/// testing device code paths on machines without a GPU.
///
/// Emulated devices are opt-in and never chosen silently: they exist once
/// enabled, through the environment or through enable_emulated_devices().
///
/// Environment, read when devices are first counted:
/// - `SYNCMEM_EMULATED_DEVICES=N`: N devices (0 to 64)
/// - `SYNCMEM_EMULATED_DELAY_US=U`: each stream operation waits a random 0..U
///   microseconds before it runs, to widen race windows
/// - `SYNCMEM_EMULATED_MEMORY_MB=M`: memory per device (default 2048)
/// - `SYNCMEM_EMULATED_POISON=0|1`: fill fresh allocations with 0xFF bytes
///   (default 1), to expose reads of memory nothing wrote
///
/// What an emulated device is: every device allocation is separate host
/// memory, known to the device (so a pointer's kind and range can be queried);
/// each stream is a worker thread that runs its work in order; events complete
/// when the work recorded before them has run; device memory may be read and
/// written directly by the host, since it is host memory.

#include <chrono>
#include <cstddef>

namespace syncmem {

/// @brief How emulated devices behave.
struct emulated_options {
  int device_count = 1;                                  ///< 0 to 64
  std::size_t memory_per_device = std::size_t{2} << 30;  ///< bytes each device can hand out
  std::chrono::microseconds max_delay{0};                ///< random delay before each stream operation
  bool poison = true;                                    ///< fill fresh allocations with 0xFF
};

/// @brief Enables emulated devices, or changes their options. Devices can be
/// added but never removed: a smaller count than before is an error. Delay and
/// poisoning apply to all devices from now on; memory_per_device to devices
/// added by this call.
/// @throws syncmem::logic_error for a count outside 0..64 or smaller than the current one.
void enable_emulated_devices(const emulated_options& options);

/// @brief The options in force (device_count 0 when none are enabled).
[[nodiscard]] emulated_options emulated_device_options();

/// @brief Changes the random delay before each emulated stream operation.
void set_emulated_delay(std::chrono::microseconds max_delay);

/// @brief Turns poisoning of fresh emulated allocations on or off.
void set_emulated_poison(bool poison);

}  // namespace syncmem
