// syncmem.synced_memory and syncmem.tensor. The Python objects hold C++
// values (a tensor, a shared_ptr to a synced_memory) and nothing in C++ holds
// a Python object, so that syncmem may let go of memory on any thread.

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <memory>
#include <string>

#include "bindings.hpp"
#include "py_memory.hpp"
#include "syncmem/error.hpp"
#include "syncmem/synced_memory.hpp"
#include "syncmem/tensor.hpp"

namespace syncmem::python {
namespace {

using namespace nb::literals;

synced_memory_options make_options(const std::string& label, bool pinned, bool zero_fill) {
  synced_memory_options options;
  options.label = label;
  options.host_kind = pinned ? host_memory_kind::pinned : host_memory_kind::pageable;
  options.zero_fill = zero_fill;
  return options;
}

nb::tuple shape_tuple(const syncmem::shape& s) {
  nb::list extents;
  for (const std::int64_t e : s.extents()) extents.append(e);
  return nb::tuple(extents);
}

nb::dict counters_dict(const transfer_counters& c) {
  nb::dict d;
  d["to_device_copies"] = c.to_device_copies;
  d["to_device_bytes"] = c.to_device_bytes;
  d["to_host_copies"] = c.to_host_copies;
  d["to_host_bytes"] = c.to_host_bytes;
  d["device_copies"] = c.device_copies;
  d["device_bytes"] = c.device_bytes;
  return d;
}

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

synced_memory& storage_of(const tensor& t) {
  if (!t.has_storage()) throw logic_error{"syncmem.tensor: this tensor has no storage"};
  return *t.storage();
}

void fill_from(tensor& t, nb::handle value, const stream_view* s) {
  if (PyBool_Check(value.ptr())) {
    const std::int64_t v = value.ptr() == Py_True ? 1 : 0;
    s != nullptr ? t.fill(v, *s) : t.fill(v);
  } else if (PyLong_Check(value.ptr())) {
    const auto v = nb::cast<std::int64_t>(value);
    s != nullptr ? t.fill(v, *s) : t.fill(v);
  } else if (PyFloat_Check(value.ptr())) {
    const auto v = nb::cast<double>(value);
    s != nullptr ? t.fill(v, *s) : t.fill(v);
  } else {
    throw nb::type_error("syncmem.tensor.fill: the value is a bool, an int or a float");
  }
}

}  // namespace

void bind_memory(nb::module_& module) {
  nb::enum_<sync_state>(module, "sync_state", "Which side of a buffer holds the newest contents.")
      .value("uninitialized", sync_state::uninitialized)
      .value("at_host", sync_state::at_host)
      .value("at_device", sync_state::at_device)
      .value("synced", sync_state::synced);

  nb::class_<py_memory>(module, "synced_memory",
                        "A buffer of bytes with a host side and a device side that synchronise lazily "
                        "(syncmem::synced_memory). Like the C++ type, one caller at a time.")
      .def(
          "__init__",
          [](py_memory* self, std::size_t nbytes, nb::handle device, const std::string& label, bool pinned,
             bool zero_fill) {
            const device_id d = to_device(device);
            new (self) py_memory{std::make_shared<synced_memory>(nbytes, d, make_options(label, pinned, zero_fill))};
          },
          "nbytes"_a, "device"_a = nb::none(), nb::kw_only(), "label"_a = "", "pinned"_a = true, "zero_fill"_a = true)
      .def_prop_ro("size", [](const py_memory& m) { return m.get().size(); })
      .def_prop_ro("capacity", [](const py_memory& m) { return m.get().capacity(); })
      .def_prop_ro("state", [](const py_memory& m) { return m.get().state(); })
      .def_prop_ro("device", [](const py_memory& m) { return m.get().device(); })
      .def_prop_ro("label", [](const py_memory& m) { return m.get().label(); })
      .def_prop_ro("reallocations", [](const py_memory& m) { return m.get().reallocations(); })
      .def_prop_ro("counters", [](const py_memory& m) { return counters_dict(m.get().counters()); })
      .def_prop_ro("host_borrowed", [](const py_memory& m) { return m.get().host_borrowed(); })
      .def_prop_ro("device_borrowed", [](const py_memory& m) { return m.get().device_borrowed(); })
      .def_prop_ro("has_host_memory", [](const py_memory& m) { return m.get().has_host_memory(); })
      .def_prop_ro("has_device_memory", [](const py_memory& m) { return m.get().has_device_memory(); })
      .def(
          "resize",
          [](py_memory& m, std::size_t nbytes, bool keep) {
            nb::gil_scoped_release unlocked;
            m.get().resize(nbytes, keep ? resize_mode::keep : resize_mode::discard);
          },
          "nbytes"_a, "keep"_a = true)
      .def(
          "host_ptr",
          [](py_memory& m, bool writable) {
            nb::gil_scoped_release unlocked;
            return address(writable ? m.get().mutable_host_data() : m.get().host_data());
          },
          "writable"_a = false, "The host side's address, up to date; writable makes the host side the newest.")
      .def(
          "device_ptr",
          [](py_memory& m, bool writable, nb::handle stream) {
            const stream_view s = to_stream(stream, m.get().device());
            nb::gil_scoped_release unlocked;
            return address(writable ? m.get().mutable_device_data(s) : m.get().device_data(s));
          },
          "writable"_a = false, "stream"_a = nb::none(),
          "The device side's address, up to date in order on the stream; writable makes it the newest.")
      .def(
          "prefetch_to_device",
          [](py_memory& m, nb::handle stream) {
            const stream_view s = to_stream(stream, m.get().device());
            m.get().prefetch_to_device(s);
          },
          "stream"_a = nb::none())
      .def(
          "prefetch_to_host",
          [](py_memory& m, nb::handle stream) {
            const stream_view s = to_stream(stream, m.get().device());
            m.get().prefetch_to_host(s);
          },
          "stream"_a = nb::none())
      .def("ready", [](const py_memory& m) { return m.get().ready(); })
      .def("synchronize", [](py_memory& m) {
        nb::gil_scoped_release unlocked;
        m.get().synchronize();
      });

  nb::class_<tensor>(module, "tensor",
                     "An N-d array of one dtype in a synced_memory (syncmem::tensor): host and device sides that "
                     "synchronise lazily. Exports through DLPack and __cuda_array_interface__.")
      .def(
          "__init__",
          [](tensor* self, nb::handle shape, nb::handle dtype, nb::handle device, const std::string& label, bool pinned,
             bool zero_fill) {
            const auto s = to_shape(shape);
            const auto t = to_dtype(dtype);
            const device_id d = to_device(device);
            new (self) tensor{t, s, d, make_options(label, pinned, zero_fill)};
          },
          "shape"_a, "dtype"_a = "float32", "device"_a = nb::none(), nb::kw_only(), "label"_a = "", "pinned"_a = true,
          "zero_fill"_a = true)
      .def_static(
          "from_storage",
          [](const py_memory& storage, nb::handle shape, nb::handle dtype, std::size_t offset) {
            return tensor{to_dtype(dtype), to_shape(shape), storage.mem, offset};
          },
          "storage"_a, "shape"_a, "dtype"_a = "uint8", "offset"_a = 0,
          "A tensor over (part of) a synced_memory, sharing it; offset in bytes.")
      .def_prop_ro("shape", [](const tensor& t) { return shape_tuple(t.shape()); })
      .def_prop_ro("dtype", [](const tensor& t) { return to_string(t.dtype()); })
      .def_prop_ro("ndim", &tensor::num_axes)
      .def_prop_ro("numel", &tensor::numel)
      .def_prop_ro("size", &tensor::numel)
      .def_prop_ro("nbytes", &tensor::nbytes)
      .def_prop_ro("itemsize", &tensor::itemsize)
      .def_prop_ro("device", &tensor::device)
      .def_prop_ro("label", [](const tensor& t) { return t.label(); })
      .def_prop_ro("state", &tensor::state)
      .def_prop_ro("capacity", &tensor::capacity)
      .def_prop_ro("reallocations", &tensor::reallocations)
      .def_prop_ro("storage_offset", &tensor::storage_offset)
      .def_prop_ro(
          "storage", [](const tensor& t) { return py_memory{t.storage()}; },
          "The synced_memory the tensor is a view of (shared).")
      .def_prop_ro("counters", [](const tensor& t) { return counters_dict(storage_of(t).counters()); })
      .def(
          "host_ptr",
          [](tensor& t, bool writable) {
            nb::gil_scoped_release unlocked;
            return address(writable ? t.mutable_host_data() : t.host_data());
          },
          "writable"_a = false, "The host side's address, up to date; writable makes the host side the newest.")
      .def(
          "device_ptr",
          [](tensor& t, bool writable, nb::handle stream) {
            const stream_view s = to_stream(stream, t.device());
            nb::gil_scoped_release unlocked;
            return address(writable ? t.mutable_device_data(s) : t.device_data(s));
          },
          "writable"_a = false, "stream"_a = nb::none(),
          "The device side's address, up to date in order on the stream; writable makes it the newest.")
      .def(
          "mark_host_modified",
          [](tensor& t) {
            nb::gil_scoped_release unlocked;
            (void)t.mutable_host_data();
          },
          "Records a write made through an exported host view: the host side becomes the newest.")
      .def(
          "mark_device_modified",
          [](tensor& t, nb::handle stream) {
            const stream_view s = to_stream(stream, t.device());
            (void)t.mutable_device_data(s);
          },
          "stream"_a = nb::none(), "Records a write made on the device through an export (in order on the stream).")
      .def(
          "prefetch_to_device",
          [](tensor& t, nb::handle stream) { t.prefetch_to_device(to_stream(stream, t.device())); },
          "stream"_a = nb::none(), "Starts bringing the device side up to date on the stream, without blocking.")
      .def("prefetch_to_host", &tensor::prefetch_to_host, "Starts bringing the host side up to date, without blocking.")
      .def("ready", [](const tensor& t) { return storage_of(t).ready(); })
      .def("synchronize", &tensor::synchronize, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "view", [](const tensor& t, nb::handle shape) { return t.view(to_shape(shape)); }, "shape"_a)
      .def("slice", &tensor::slice, "begin"_a, "end"_a, "Rows begin..end of the first axis, sharing the storage.")
      .def(
          "clone",
          [](const tensor& t, nb::handle device) {
            if (device.is_none()) return t.clone();
            return t.clone(to_device(device));
          },
          "device"_a = nb::none(), nb::call_guard<>())
      .def(
          "reshape",
          [](tensor& t, nb::handle shape, bool keep) {
            t.reshape(to_shape(shape), keep ? resize_mode::keep : resize_mode::discard);
          },
          "shape"_a, "keep"_a = true, "Changes the shape in place; reallocates only past the capacity.")
      .def(
          "copy_from",
          [](tensor& t, const tensor& source, nb::handle stream) {
            if (stream.is_none()) {
              t.copy_from(source);
            } else {
              t.copy_from(source, to_stream(stream, t.device()));
            }
          },
          "source"_a, "stream"_a = nb::none())
      .def(
          "fill",
          [](tensor& t, nb::handle value, nb::handle stream) {
            if (stream.is_none()) {
              fill_from(t, value, nullptr);
            } else {
              const stream_view s = to_stream(stream, t.device());
              fill_from(t, value, &s);
            }
          },
          "value"_a, "stream"_a = nb::none())
      .def(
          "zero",
          [](tensor& t, nb::handle stream) {
            if (stream.is_none()) {
              t.zero();
            } else {
              t.zero(to_stream(stream, t.device()));
            }
          },
          "stream"_a = nb::none())
      .def("__repr__", [](const tensor& t) { return t.to_string(); })
      .def("__len__", [](const tensor& t) {
        if (t.num_axes() == 0) throw nb::type_error("len() of a 0-d syncmem.tensor");
        return t.shape().extents()[0];
      });
}

}  // namespace syncmem::python
