#pragma once

// What the parts of the _syncmem module share: argument conversion (devices,
// dtypes, shapes, streams given the Python way) and the registration
// functions each part provides.

#include <nanobind/nanobind.h>

#include <atomic>
#include <optional>
#include <string>

#include "syncmem/device_id.hpp"
#include "syncmem/dtype.hpp"
#include "syncmem/shape.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);
void bind_devices(nb::module_& m);
void bind_memory(nb::module_& m);
void bind_dlpack(nb::module_& m);
void bind_allocators(nb::module_& m);
void bind_ipc(nb::module_& m);

// The Python exception types (made by bind_errors), for raising from the bindings.
PyObject* logic_error_type() noexcept;

// Set once Python has begun to exit (atexit): from then on, a producer's
// DLPack deleter is not called any more (it may need an interpreter that is
// gone); the memory it holds is left to the process's end.
extern std::atomic<bool> python_exiting;

// A device given as syncmem.device, "cuda:1", "emulated:0", "cuda" (index 0),
// or None (the current device).
[[nodiscard]] device_id to_device(nb::handle h);

// A dtype given as "float32", numpy.float32, numpy.dtype("float32"),
// torch.float32 or syncmem's own name; TypeError naming the supported ones.
[[nodiscard]] syncmem::dtype to_dtype(nb::handle h);

// A shape given as an int or a sequence of ints.
[[nodiscard]] syncmem::shape to_shape(nb::handle h);

// A stream for work on `device`: None (the device's default stream), a
// syncmem.stream, an int handle (CUDA; 1 and 0 are the legacy default
// stream, 2 the per-thread one, as in DLPack), or an object with `cuda_stream`
// (torch.cuda.Stream) or `ptr` (cupy.cuda.Stream).
[[nodiscard]] stream_view to_stream(nb::handle h, device_id device);

// The int a CUDA stream is named by in DLPack and __cuda_array_interface__:
// 1 for the legacy default stream.
[[nodiscard]] std::intptr_t stream_number(stream_view s);

}  // namespace syncmem::python
