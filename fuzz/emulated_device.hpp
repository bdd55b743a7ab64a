#pragma once

// What the fuzzers that touch a device share: one emulated device with
// 256 MiB, enabled from LLVMFuzzerInitialize.

#include <cstddef>

#include "syncmem/emulated.hpp"

namespace syncmem::fuzz {

inline void enable_one_emulated_device() {
  emulated_options options;
  options.device_count = 1;
  options.memory_per_device = std::size_t{256} << 20;
  enable_emulated_devices(options);
}

}  // namespace syncmem::fuzz
