#pragma once

// Factories for the conformance suite over adaptors: each adaptor wraps a
// source resource of its device kind that lives as long as the test program
// (so that the adaptor, which does not own it, can never outlive it).

#include <memory>

#include "resource_conformance.hpp"
#include "syncmem/mr/device_resource.hpp"

namespace syncmem::test {

template <device_kind Kind, int Index = 0>
struct adapted_source : on_device<Kind> {
  static device_id device() { return device_id{Kind, Index}; }
  static mr::memory_resource& upstream() {
    static auto* const source = new mr::device_resource{device_id{Kind, Index}};
    return *source;
  }
};

}  // namespace syncmem::test
