#pragma once

/// @file compat/device.hpp
/// @brief Which devices the compat layers (Caffe, darknet, tensorRT_Pro) use.
///
/// The seeds' APIs take plain integer device ids. Here they count devices of
/// one kind: CUDA devices when there is at least one, else emulated devices
/// when they are enabled (SYNCMEM_EMULATED_DEVICES). With neither, using a
/// device throws syncmem::unsupported_error.

#include "syncmem/device_id.hpp"

namespace syncmem::compat {

/// @brief CUDA when there are CUDA devices, else emulated.
[[nodiscard]] device_kind kind();
/// @brief The device with integer id `id` of that kind (-1: the current device).
/// @throws syncmem::logic_error for an id out of range
[[nodiscard]] device_id to_device(int id);
/// @brief The current device of that kind.
[[nodiscard]] device_id current();

}  // namespace syncmem::compat
