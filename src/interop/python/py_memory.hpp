#pragma once

// syncmem.synced_memory: a shared synced_memory, so that tensors made over it
// (tensor.from_storage) and the Python object share one buffer.

#include <memory>

#include "syncmem/error.hpp"
#include "syncmem/synced_memory.hpp"

namespace syncmem::python {

struct py_memory {
  std::shared_ptr<synced_memory> mem;

  [[nodiscard]] synced_memory& get() const {
    if (mem == nullptr) throw logic_error{"syncmem.synced_memory: this object holds no buffer"};
    return *mem;
  }
};

}  // namespace syncmem::python
