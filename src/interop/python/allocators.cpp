// Allocations from syncmem's resources handed to other libraries' allocator
// hooks (syncmem.cupy): an object that owns one block and gives it back,
// stream-ordered, when the last Python reference to it goes.

#include <nanobind/nanobind.h>

#include <cstdint>
#include <utility>

#include "bindings.hpp"
#include "mr/default_host_resource.hpp"
#include "syncmem/device.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"

namespace syncmem::python {
namespace {

using namespace nb::literals;

// One block of a resource, freed on the stream it was allocated for.
class allocation {
 public:
  allocation(mr::memory_resource& resource, std::size_t bytes, stream_view s)
      : resource_{&resource}, bytes_{bytes}, stream_{s}, ptr_{resource.allocate(bytes, s)} {}
  allocation(const allocation&) = delete;
  allocation& operator=(const allocation&) = delete;
  allocation(allocation&& other) noexcept
      : resource_{other.resource_},
        bytes_{other.bytes_},
        stream_{other.stream_},
        ptr_{std::exchange(other.ptr_, nullptr)} {}
  allocation& operator=(allocation&&) = delete;
  ~allocation() {
    if (ptr_ != nullptr) resource_->deallocate(ptr_, bytes_, stream_);
  }

  [[nodiscard]] std::uintptr_t ptr() const noexcept { return reinterpret_cast<std::uintptr_t>(ptr_); }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  [[nodiscard]] device_id device() const noexcept { return stream_.device(); }

 private:
  mr::memory_resource* resource_;
  std::size_t bytes_;
  stream_view stream_;
  void* ptr_;
};

}  // namespace

void bind_allocators(nb::module_& m) {
  nb::class_<allocation>(m, "allocation",
                         "A block of a syncmem resource, given back on its stream when the object goes (for "
                         "other libraries' allocator hooks, e.g. syncmem.cupy).")
      .def_prop_ro("ptr", &allocation::ptr)
      .def_prop_ro("size", &allocation::size)
      .def_prop_ro("device", &allocation::device);

  m.def(
      "allocate_device",
      [](std::size_t nbytes, nb::handle device, nb::handle stream) {
        const device_id d = to_device(device);
        const stream_view s = to_stream(stream, d);
        nb::gil_scoped_release unlocked;
        return allocation{mr::get_per_device_resource(d), nbytes, s};
      },
      "nbytes"_a, "device"_a = nb::none(), "stream"_a = nb::none(),
      "Device memory from the device's resource (the caching one by default), usable in order on `stream` and "
      "freed on it.");
  m.def(
      "allocate_pinned",
      [](std::size_t nbytes, nb::handle device, nb::handle stream) {
        const device_id d = to_device(device);
        const stream_view s = to_stream(stream, d);
        auto& resource = mr::detail::default_host_resource(memory_kind::pinned_host, d.kind());
        nb::gil_scoped_release unlocked;
        return allocation{resource, nbytes, s};
      },
      "nbytes"_a, "device"_a = nb::none(), "stream"_a = nb::none(),
      "Pinned host memory from syncmem's caching pinned resource; reused only after the work queued on `stream` "
      "before it was freed has completed.");
}

}  // namespace syncmem::python
