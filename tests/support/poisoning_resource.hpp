#pragma once

// A resource that fills every allocation with 0xFF before handing it out (in
// stream order for device memory), so that a test can tell "nothing wrote it"
// from "zeroed" on any device kind and behind any cache.

#include <cstring>
#include <string>

#include "backend/backend.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::test {

class poisoning_resource final : public mr::memory_resource {
 public:
  explicit poisoning_resource(mr::memory_resource& upstream)
      : memory_resource{upstream.kind(), upstream.device(), upstream.max_alignment()}, upstream_{upstream} {}
  std::string name() const override { return "poisoning(" + upstream_.name() + ")"; }

 private:
  void* do_allocate(std::size_t bytes, stream_view s, std::size_t a) override {
    void* p = upstream_.allocate(bytes, s, a);
    if (kind() == memory_kind::device) {
      device_guard guard{s.device()};
      detail::backend_for(s.device()).memset_async(p, 0xFF, bytes, s.device().index(), s.handle());
    } else {
      s.synchronize();
      std::memset(p, 0xFF, bytes);
    }
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, stream_view s, std::size_t a) noexcept override {
    upstream_.deallocate(p, bytes, s, a);
  }
  mr::memory_resource& upstream_;
};

}  // namespace syncmem::test
