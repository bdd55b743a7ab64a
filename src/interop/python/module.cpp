// syncmem._syncmem: the native half of the Python package (python/syncmem).

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "syncmem/version.hpp"

NB_MODULE(_syncmem, m) {
  namespace py = syncmem::python;
  m.doc() = "syncmem: host/device memory that synchronises itself (native part; import syncmem)";
  const syncmem::build_info info = syncmem::get_build_info();
  m.attr("__version__") = info.version;
  m.attr("built_with_cuda") = info.cuda_enabled;
  py::bind_errors(m);
  py::bind_devices(m);
  py::bind_memory(m);
  py::bind_dlpack(m);
  py::bind_allocators(m);
  py::bind_ipc(m);
}
