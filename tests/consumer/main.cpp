// A program outside the project that uses syncmem through find_package.
#include <cstdio>

#include "syncmem/syncmem.hpp"

int main() {
  syncmem::enable_emulated_devices({.device_count = 1});
  syncmem::stream s{syncmem::device_id::emulated(0)};
  int value = 0;
  s.launch_host_func([&value] { value = 42; });
  s.synchronize();
  std::printf("syncmem %s consumer: %d\n", syncmem::get_build_info().version.c_str(), value);
  return value == 42 ? 0 : 1;
}
