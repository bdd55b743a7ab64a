// Devices, streams, emulated devices and the allocator's statistics, and the
// conversions every binding uses to take them from Python.

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda_stream_handles.hpp"
#include "bindings.hpp"
#if SYNCMEM_PYTHON_HAS_CUDA
#include "cuda/stream_device.hpp"
#endif
#include "py_stream.hpp"
#include "syncmem/device.hpp"
#include "syncmem/emulated.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::python {
namespace {

std::string supported_dtypes() {
  std::string names;
  for (const syncmem::dtype t : all_dtypes) names += (names.empty() ? "" : ", ") + to_string(t);
  return names;
}

device_id parse_device(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view digits = text.substr(colon + 1);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc{} || end != digits.data() + digits.size() || digits.empty())
      throw nb::value_error(
          ("syncmem: bad device '" + std::string{text} + "': expected 'cuda:N' or 'emulated:N' with N a device index")
              .c_str());
  }
  if (const auto parsed = parse_device_kind(kind)) return {*parsed, index};
  if (kind == "cpu")
    throw nb::value_error(
        "syncmem: 'cpu' is not a syncmem device: host memory is the host side of a tensor of a device "
        "(a CUDA or emulated one)");
  throw nb::value_error(("syncmem: bad device '" + std::string{text} + "': expected 'cuda:N' or 'emulated:N'").c_str());
}

nb::dict caching_statistics_dict(const mr::caching_statistics& s) {
  nb::dict d;
  d["allocated_bytes"] = s.allocated_bytes;
  d["peak_allocated_bytes"] = s.peak_allocated_bytes;
  d["requested_bytes"] = s.requested_bytes;
  d["peak_requested_bytes"] = s.peak_requested_bytes;
  d["reserved_bytes"] = s.reserved_bytes;
  d["peak_reserved_bytes"] = s.peak_reserved_bytes;
  d["cached_bytes"] = s.cached_bytes;
  d["pending_bytes"] = s.pending_bytes;
  d["largest_free_block"] = s.largest_free_block;
  d["live_allocations"] = s.live_allocations;
  d["allocations"] = s.allocations;
  d["deallocations"] = s.deallocations;
  d["cache_hits"] = s.cache_hits;
  d["cache_misses"] = s.cache_misses;
  d["segments"] = s.segments;
  d["segment_allocations"] = s.segment_allocations;
  d["segment_releases"] = s.segment_releases;
  d["oom_retries"] = s.oom_retries;
  d["ooms"] = s.ooms;
  d["total_allocated_bytes"] = s.total_allocated_bytes;
  d["total_freed_bytes"] = s.total_freed_bytes;
  d["total_requested_bytes"] = s.total_requested_bytes;
  d["total_requested_freed_bytes"] = s.total_requested_freed_bytes;
  return d;
}

}  // namespace

device_id to_device(nb::handle h) {
  if (h.is_none()) return current_device();
  if (nb::isinstance<device_id>(h)) return nb::cast<device_id>(h);
  if (nb::isinstance<nb::str>(h)) return parse_device(nb::cast<std::string>(h));
  if (PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr())) return device_id::cuda(nb::cast<int>(h));
  if (nb::hasattr(h, "type") && nb::hasattr(h, "index")) {  // torch.device
    const auto type = nb::cast<std::string>(nb::str(h.attr("type")));
    nb::object index = h.attr("index");
    return parse_device(index.is_none() ? type : type + ":" + nb::cast<std::string>(nb::str(index)));
  }
  throw nb::type_error(("syncmem: a device is a syncmem.device, 'cuda:N', 'emulated:N', an int (a CUDA device) or "
                        "None (the current device), not " +
                        nb::cast<std::string>(nb::repr(h.type())))
                           .c_str());
}

syncmem::dtype to_dtype(nb::handle h) {
  std::string name;
  if (nb::isinstance<nb::str>(h)) {
    name = nb::cast<std::string>(h);
  } else if (nb::hasattr(h, "name") && nb::isinstance<nb::str>(h.attr("name"))) {  // numpy.dtype
    name = nb::cast<std::string>(h.attr("name"));
  } else if (PyType_Check(h.ptr())) {  // numpy.float32, bool, float, int
    name = nb::cast<std::string>(h.attr("__name__"));
    if (name == "float") name = "float64";
    if (name == "int") name = "int64";
    if (name == "bool_") name = "bool";
  } else {
    name = nb::cast<std::string>(nb::str(h));  // torch.float32
  }
  if (name.starts_with("torch.")) name = name.substr(6);
  if (name == "half") name = "float16";
  for (const syncmem::dtype t : all_dtypes) {
    if (to_string(t) == name) return t;
  }
  throw nb::type_error(
      ("syncmem: dtype '" + name + "' is not supported; the dtypes are " + supported_dtypes()).c_str());
}

syncmem::shape to_shape(nb::handle h) {
  std::vector<std::int64_t> extents;
  if (PyLong_Check(h.ptr())) {
    extents.push_back(nb::cast<std::int64_t>(h));
  } else if (nb::isinstance<nb::sequence>(h) && !nb::isinstance<nb::str>(h)) {
    for (nb::handle item : h) {
      if (!PyLong_Check(item.ptr()) && !PyIndex_Check(item.ptr()))
        throw nb::type_error("syncmem: a shape is a sequence of ints");
      extents.push_back(nb::cast<std::int64_t>(nb::int_(item)));
    }
  } else {
    throw nb::type_error("syncmem: a shape is an int or a sequence of ints");
  }
  return syncmem::shape{std::span<const std::int64_t>{extents}};
}

std::intptr_t stream_number(stream_view s) {
  if (s.handle() == stream_handle{}) return 1;  // DLPack's and CAI's name of the legacy default stream
  return static_cast<std::intptr_t>(s.handle());
}

stream_view to_stream(nb::handle h, device_id device) {
  if (h.is_none()) return default_stream(device);
  if (nb::isinstance<py_stream>(h)) {
    const stream_view s = nb::cast<py_stream&>(h).view;
    if (s.device() != device)
      throw logic_error{"syncmem: the stream given belongs to " + to_string(s.device()) + ", the memory to " +
                        to_string(device) + "; pass a stream of " + to_string(device)};
    return s;
  }
  nb::object number;
  if (PyLong_Check(h.ptr())) {
    number = nb::borrow(h);
  } else if (nb::hasattr(h, "cuda_stream")) {  // torch.cuda.Stream
    number = h.attr("cuda_stream");
  } else if (nb::hasattr(h, "ptr")) {  // cupy.cuda.Stream
    number = h.attr("ptr");
  } else {
    throw nb::type_error(("syncmem: a stream is a syncmem.stream, a CUDA stream handle (int), a torch or cupy stream, "
                          "or None, not " +
                          nb::cast<std::string>(nb::repr(h.type())))
                             .c_str());
  }
  if (device.kind() != device_kind::cuda)
    throw logic_error{"syncmem: a CUDA stream handle was given for " + to_string(device) +
                      ", which is not a CUDA device; pass a syncmem.stream of that device"};
  check_device(device);
  const auto value = nb::cast<std::intptr_t>(number);
  if (value == 0 || value == 1) return default_stream(device);  // the legacy default stream
#if SYNCMEM_PYTHON_HAS_CUDA
  // The per-thread default stream belongs to whichever device is current.
  if (stream_handle{static_cast<std::uintptr_t>(value)} != detail::cuda_per_thread_stream()) {
    const auto owner = cuda_stream_device(value);
    if (owner && *owner != device.index())
      throw logic_error{"syncmem: the CUDA stream given belongs to " + to_string(device_id::cuda(*owner)) +
                        ", the memory to " + to_string(device) + "; pass a stream of " + to_string(device)};
  }
#endif
  return detail::stream_access::make(device, stream_handle{static_cast<std::uintptr_t>(value)});
}

void bind_devices(nb::module_& m) {
  nb::enum_<device_kind>(m, "device_kind").value("cuda", device_kind::cuda).value("emulated", device_kind::emulated);

  nb::class_<device_id>(m, "device", "A device: syncmem.device('cuda:0'), syncmem.device('emulated', 1).")
      .def("__init__", [](device_id* self, nb::handle spec) { new (self) device_id{to_device(spec)}; })
      .def("__init__", [](device_id* self, const std::string& kind,
                          int index) { new (self) device_id{parse_device(kind + ":" + std::to_string(index))}; })
      .def_prop_ro("kind", [](device_id d) { return to_string(d.kind()); })
      .def_prop_ro("index", &device_id::index)
      .def("__eq__",
           [](device_id a, nb::handle b) { return nb::isinstance<device_id>(b) && a == nb::cast<device_id>(b); })
      .def("__hash__", [](device_id d) { return std::hash<device_id>{}(d); })
      .def("__str__", [](device_id d) { return to_string(d); })
      .def("__repr__", [](device_id d) { return "syncmem.device('" + to_string(d) + "')"; });

  m.def(
      "device_count",
      [](std::optional<std::string> kind) {
        if (!kind) return device_count();
        return device_count(parse_device(*kind + ":0").kind());
      },
      nb::arg("kind") = nb::none(),
      "Devices syncmem can use: CUDA ones and emulated ones (kind='cuda' or 'emulated' counts one kind).");
  m.def("devices", &syncmem::devices, "Every device syncmem can use.");
  m.def(
      "why_no_devices", [](const std::string& kind) { return why_no_devices(parse_device(kind + ":0").kind()); },
      nb::arg("kind") = "cuda", "Why there are no devices of a kind (empty when there are some).");
  m.def("current_device", &current_device);
  m.def(
      "set_current_device", [](nb::handle d) { set_current_device(to_device(d)); }, nb::arg("device"));
  m.def(
      "synchronize",
      [](nb::handle d) {
        const device_id id = to_device(d);
        nb::gil_scoped_release unlocked;
        synchronize_device(id);
      },
      nb::arg("device") = nb::none(), "Waits for all work on a device.");
  m.def(
      "enable_emulated_devices",
      [](int count, std::size_t memory_per_device, std::int64_t max_delay_us, bool poison) {
        enable_emulated_devices({.device_count = count,
                                 .memory_per_device = memory_per_device,
                                 .max_delay = std::chrono::microseconds{max_delay_us},
                                 .poison = poison});
      },
      nb::arg("count") = 1, nb::arg("memory_per_device") = std::size_t{2} << 30, nb::arg("max_delay_us") = 0,
      nb::arg("poison") = true, "Devices made of host memory and worker threads, to develop and test without a GPU.");
  m.def(
      "memory_stats",
      [](nb::handle d) { return caching_statistics_dict(mr::default_resource(to_device(d)).statistics()); },
      nb::arg("device") = nb::none(), "The statistics of the device's default caching resource.");
  m.def(
      "empty_cache",
      [](nb::handle d) {
        auto& r = mr::default_resource(to_device(d));
        nb::gil_scoped_release unlocked;
        r.empty_cache();
      },
      nb::arg("device") = nb::none(), "Gives the cached free memory of the device's default resource back.");

  nb::class_<py_stream>(m, "stream",
                        "A stream of a device: work on it runs in order. syncmem.stream(device) makes and owns one; "
                        "syncmem.stream.wrap(handle, device) names a CUDA stream someone else owns.")
      .def(
          "__init__",
          [](py_stream* self, nb::handle device, bool non_blocking, int priority) {
            auto owned = std::make_shared<syncmem::stream>(
                to_device(device), stream_options{.non_blocking = non_blocking, .priority = priority});
            new (self) py_stream{owned, owned->view()};
          },
          nb::arg("device") = nb::none(), nb::arg("non_blocking") = true, nb::arg("priority") = 0)
      .def_static(
          "wrap",
          [](nb::handle handle, nb::handle device) {
            const device_id id = to_device(device);
            return py_stream{nullptr, to_stream(handle, id)};
          },
          nb::arg("handle"), nb::arg("device") = nb::none())
      .def_static(
          "default",
          [](nb::handle device) {
            return py_stream{nullptr, default_stream(to_device(device))};
          },
          nb::arg("device") = nb::none(), "The device's default stream (CUDA: the legacy default stream).")
      .def_prop_ro("device", [](const py_stream& s) { return s.view.device(); })
      .def_prop_ro("handle", [](const py_stream& s) { return static_cast<std::intptr_t>(s.view.handle()); })
      .def_prop_ro("owned", [](const py_stream& s) { return s.owned != nullptr; })
      .def("synchronize",
           [](const py_stream& s) {
             nb::gil_scoped_release unlocked;
             s.view.synchronize();
           })
      .def("ready", [](const py_stream& s) { return s.view.ready(); })
      .def("__eq__",
           [](const py_stream& a, nb::handle b) {
             return nb::isinstance<py_stream>(b) && a.view == nb::cast<py_stream&>(b).view;
           })
      .def("__hash__", [](const py_stream& s) { return std::hash<stream_handle>{}(s.view.handle()); })
      .def("__repr__", [](const py_stream& s) {
        return "syncmem.stream(" + to_string(s.view.device()) +
               ", handle=" + std::to_string(static_cast<std::intptr_t>(s.view.handle())) + ")";
      });
}

}  // namespace syncmem::python
