#pragma once

// syncmem.stream: a stream syncmem made and owns, or one it names (a device's
// default stream, a CUDA stream of PyTorch's or CuPy's).

#include <memory>

#include "syncmem/stream.hpp"

namespace syncmem::python {

struct py_stream {
  std::shared_ptr<syncmem::stream> owned;  // null when someone else owns the stream
  stream_view view;
};

}  // namespace syncmem::python
