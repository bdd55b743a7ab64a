// libFuzzer target for the .npy reader (syncmem/npy.hpp). Whatever the input,
// parse_npy_header and from_npy either succeed or throw syncmem::npy_error;
// anything else (a crash, a sanitizer report, another exception) is a bug. A
// file that loads is written back and loaded again, and must give the same
// tensor.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "emulated_device.hpp"
#include "syncmem/npy.hpp"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  syncmem::fuzz::enable_one_emulated_device();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(data), size};
  const auto device = syncmem::device_id::emulated(0);
  try {
    (void)syncmem::parse_npy_header(bytes);
  } catch (const syncmem::npy_error&) {  // NOLINT(bugprone-empty-catch): refusing is a right answer
  }
  try {
    const syncmem::tensor t = syncmem::from_npy(bytes, device);
    const syncmem::tensor back = syncmem::from_npy(syncmem::to_npy(t), device);
    const bool same = back.dtype() == t.dtype() && back.shape() == t.shape() && back.nbytes() == t.nbytes() &&
                      (t.nbytes() == 0 || std::memcmp(back.host_data(), t.host_data(), t.nbytes()) == 0);
    if (!same) std::abort();             // a round trip changed the tensor
  } catch (const syncmem::npy_error&) {  // NOLINT(bugprone-empty-catch)
  }
  return 0;
}
