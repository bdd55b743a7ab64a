#include "syncmem/mr/registered_memory.hpp"

#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"

namespace syncmem::mr {

namespace {

unsigned to_flags(register_flags f) {
  unsigned flags = 0;
  if (f.portable) flags |= syncmem::detail::host_register_portable;
  if (f.mapped) flags |= syncmem::detail::host_register_mapped;
  if (f.read_only) flags |= syncmem::detail::host_register_read_only;
  return flags;
}

// Names what `p` is when it is not plain pageable memory.
void expect_pageable(const void* p, const void* start, std::size_t size) {
  const auto a = get_pointer_attributes(p);
  if (a.kind == memory_kind::pageable_host) return;
  SYNCMEM_FAIL(fmt::format(
      "registered_memory: [{}, +{}) overlaps {} memory{} at {}{}; only pageable host memory "
      "can be registered, and only once",
      start, size, to_string(a.kind), a.device ? fmt::format(" of {}", to_string(*a.device)) : std::string{}, p,
      a.size > 0 ? fmt::format(" (an allocation [{}, +{}))", a.base, a.size) : std::string{}));
}

}  // namespace

registered_memory::registered_memory(void* data, std::size_t size, device_kind backend, register_flags flags)
    : flags_{flags}, backend_{backend} {
  SYNCMEM_EXPECTS(data != nullptr, fmt::format("registered_memory: data is null (size {})", size));
  SYNCMEM_EXPECTS(size > 0, fmt::format("registered_memory: size is 0 (data {}); the range must not be empty", data));
  SYNCMEM_EXPECTS(reinterpret_cast<std::uintptr_t>(data) <= UINTPTR_MAX - (size - 1),
                  fmt::format("registered_memory: [{}, +{}) runs past the end of the address space", data, size));
  if (device_count(backend) == 0) {
    SYNCMEM_UNSUPPORTED(fmt::format("registered_memory: no {} devices to register host memory for ({})",
                                    to_string(backend), why_no_devices(backend)));
  }
  expect_pageable(data, data, size);
  expect_pageable(static_cast<const std::byte*>(data) + (size - 1), data, size);
  syncmem::detail::backend_for(backend).register_host(data, size, to_flags(flags));
  data_ = data;
  size_ = size;
}

registered_memory::~registered_memory() { reset(); }

registered_memory::registered_memory(registered_memory&& other) noexcept
    : data_{std::exchange(other.data_, nullptr)},
      size_{std::exchange(other.size_, 0)},
      flags_{other.flags_},
      backend_{other.backend_} {}

registered_memory& registered_memory::operator=(registered_memory&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    flags_ = other.flags_;
    backend_ = other.backend_;
  }
  return *this;
}

void registered_memory::reset() noexcept {
  if (data_ == nullptr) return;
  syncmem::detail::backend_for(backend_).unregister_host(data_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace syncmem::mr
