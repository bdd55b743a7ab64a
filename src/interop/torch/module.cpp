// syncmem._torch: syncmem's caching allocator as PyTorch's CUDA allocator
// (python/syncmem/torch.py is its Python face).

#include <c10/cuda/CUDACachingAllocator.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "host_latch.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "torch_allocator.hpp"

namespace nb = nanobind;

NB_MODULE(_torch, m) {
  using syncmem::interop::host_latch;
  using syncmem::interop::torch_allocator;
  m.doc() = "syncmem's caching allocator as PyTorch's CUDA allocator (native part; import syncmem.torch)";

  m.def("install", &torch_allocator::install,
        "Makes syncmem's caching allocator PyTorch's CUDA allocator (before CUDA is used).");
  m.def("installed", &torch_allocator::installed);
  m.def(
      "save_snapshot",
      [](const std::string& path, int device) {
        std::string json;
        {
          nb::gil_scoped_release unlocked;
          json = syncmem::mr::default_resource(syncmem::device_id::cuda(device)).snapshot().to_json(1);
        }
        std::ofstream out{path, std::ios::binary | std::ios::trunc};
        out << json << '\n';
        out.close();
        SYNCMEM_EXPECTS(out.good(), "syncmem.torch.save_snapshot: cannot write '" + path + "'");
      },
      nb::arg("path"), nb::arg("device"),
      "Writes the snapshot of cuda:<device>'s caching resource (syncmem.snapshot/1, for `syncmem view`).");

  m.def(
      "_cache_info",
      [](int device) {
        std::size_t largest = 0;
        c10::cuda::CUDACachingAllocator::cacheInfo(static_cast<c10::DeviceIndex>(device), &largest);
        return largest;
      },
      nb::arg("device"), "Test aid: what PyTorch's cacheInfo answers cuDNN (the largest workspace it may ask for).");

  nb::class_<host_latch>(m, "_host_latch",
                         "Test aid: holds a CUDA stream on the host until release() (or until the object goes).")
      .def(
          "__init__",
          [](host_latch* self, std::uintptr_t stream) {
            // NOLINTNEXTLINE(performance-no-int-to-ptr): the handle comes from Python as an int
            new (self) host_latch{reinterpret_cast<cudaStream_t>(stream)};
          },
          nb::arg("stream"))
      .def("release", &host_latch::release)
      .def_prop_ro("reached", &host_latch::reached);
}
