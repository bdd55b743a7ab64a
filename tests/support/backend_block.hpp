#pragma once

// Pinned host or device memory of a device, allocated straight from its
// backend (no resource in between), for tests that must know where their
// bytes live. Host access needs the streams that use the memory idle.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"

namespace syncmem::test {

class backend_block {
 public:
  backend_block(device_id d, std::size_t size, bool on_device = false)
      : device_{d}, size_{size}, on_device_{on_device} {
    device_guard guard{d};
    auto& backend = detail::backend_for(d);
    p_ = static_cast<std::uint8_t*>(on_device ? backend.allocate(d.index(), size) : backend.allocate_pinned(size, 0));
  }
  ~backend_block() {
    device_guard guard{device_};
    auto& backend = detail::backend_for(device_);
    synchronize_device(device_);
    if (on_device_) {
      backend.deallocate(device_.index(), p_, size_);
    } else {
      backend.deallocate_pinned(p_, size_);
    }
  }
  backend_block(const backend_block&) = delete;
  backend_block& operator=(const backend_block&) = delete;

  [[nodiscard]] std::uint8_t* data() const { return p_; }
  // Host access to pinned memory.
  void write(const std::vector<std::uint8_t>& b) const { std::memcpy(p_, b.data(), b.size()); }
  [[nodiscard]] std::vector<std::uint8_t> read() const { return {p_, p_ + size_}; }

 private:
  device_id device_;
  std::size_t size_;
  bool on_device_;
  std::uint8_t* p_ = nullptr;
};

}  // namespace syncmem::test
