#pragma once

// A device resource that counts what it has handed out and not taken back, to
// prove that code frees everything it allocates (set it as a device's default
// with mr::set_per_device_resource for a test's scope).

#include <atomic>
#include <string>

#include "syncmem/mr/device_resource.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"

namespace syncmem::test {

class counting_device_resource final : public mr::memory_resource {
 public:
  explicit counting_device_resource(device_id device)
      : memory_resource{memory_kind::device, device, mr::default_alignment}, upstream_{device} {}
  std::string name() const override { return "counting_device_resource"; }
  std::atomic<int> live{0};
  std::atomic<int> allocations{0};

 private:
  void* do_allocate(std::size_t bytes, stream_view s, std::size_t a) override {
    void* p = upstream_.allocate(bytes, s, a);
    ++live;
    ++allocations;
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, stream_view s, std::size_t a) noexcept override {
    --live;
    upstream_.deallocate(p, bytes, s, a);
  }
  mr::device_resource upstream_;
};

// Makes a counting resource the default of `device` for a scope.
class scoped_counting_default {
 public:
  explicit scoped_counting_default(device_id device)
      : device_{device}, counting_{device}, previous_{mr::set_per_device_resource(device, &counting_)} {}
  ~scoped_counting_default() { mr::set_per_device_resource(device_, previous_); }
  scoped_counting_default(const scoped_counting_default&) = delete;
  scoped_counting_default& operator=(const scoped_counting_default&) = delete;
  counting_device_resource& resource() { return counting_; }

 private:
  device_id device_;
  counting_device_resource counting_;
  mr::memory_resource* previous_;
};

}  // namespace syncmem::test
