// Tensors shared between processes: the native half of syncmem's
// multiprocessing reducer (python/syncmem/__init__.py), on syncmem::ipc.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <span>

#include "bindings.hpp"
#include "syncmem/ipc.hpp"
#include "syncmem/tensor.hpp"

namespace syncmem::python {

using namespace nb::literals;

void bind_ipc(nb::module_& m) {
  m.def(
      "_ipc_export_tensor",
      [](const tensor& t, nb::handle stream) {
        const stream_view s = to_stream(stream, t.device());
        ipc::memory_handle h;
        {
          nb::gil_scoped_release unlocked;
          h = ipc::export_synced(t.storage(), s);
        }
        return nb::bytes(reinterpret_cast<const char*>(h.bytes().data()), h.bytes().size());
      },
      "tensor"_a, "stream"_a = nb::none(),
      "The handle (bytes) that shares the tensor's storage with one other process; its device side is made "
      "current on the stream first.");
  m.def(
      "_ipc_import_tensor",
      [](nb::bytes handle, nb::handle shape, nb::handle dtype, std::size_t offset) {
        const auto* data = static_cast<const std::byte*>(static_cast<const void*>(handle.c_str()));
        const auto h = ipc::memory_handle::from_bytes(std::span{data, handle.size()});
        const stream_view s = default_stream(h.device());
        std::shared_ptr<synced_memory> storage;
        {
          nb::gil_scoped_release unlocked;
          storage = ipc::import_synced(h, s);
        }
        return tensor{to_dtype(dtype), to_shape(shape), storage, offset};
      },
      "handle"_a, "shape"_a, "dtype"_a, "offset"_a,
      "A tensor over the storage another process shared (on its device's default stream).");
  m.def("ipc_collect", &ipc::collect,
        "Gives back the memory of shared tensors whose importer closed them or exited; returns how many.");
  m.def("ipc_exports_held", &ipc::exports_held, "How many shared tensors this process holds for importers.");
}

}  // namespace syncmem::python
