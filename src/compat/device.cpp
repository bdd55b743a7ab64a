#include "syncmem/compat/device.hpp"

#include <fmt/format.h>

#include "syncmem/device.hpp"
#include "syncmem/error.hpp"

namespace syncmem::compat {

device_kind kind() { return device_count(device_kind::cuda) > 0 ? device_kind::cuda : device_kind::emulated; }

device_id current() {
  const auto k = kind();
  if (device_count(k) == 0) {
    SYNCMEM_UNSUPPORTED(
        fmt::format("no device for the compat layers: {}; enable emulated devices "
                    "(SYNCMEM_EMULATED_DEVICES=N) to run without a GPU",
                    why_no_devices(device_kind::cuda)));
  }
  const auto d = current_device();
  return d.kind() == k ? d : device_id{k, 0};
}

device_id to_device(int id) {
  if (id == -1) return current();
  const device_id d{kind(), id};
  check_device(d);
  return d;
}

}  // namespace syncmem::compat
