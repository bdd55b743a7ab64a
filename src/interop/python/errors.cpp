// syncmem's exceptions as Python exceptions with the same messages. Each
// derives from syncmem.Error and from the built-in exception a Python caller
// already catches for that kind of failure:
//
//   syncmem::logic_error        syncmem.LogicError        (ValueError)
//   syncmem::out_of_memory      syncmem.OutOfMemoryError  (MemoryError)
//   syncmem::cuda_error         syncmem.CudaError         (RuntimeError)
//   syncmem::unsupported_error  syncmem.UnsupportedError  (RuntimeError)

#include <nanobind/nanobind.h>

#include <exception>

#include "bindings.hpp"
#include "syncmem/error.hpp"

namespace syncmem::python {
namespace {

PyObject* error_base = nullptr;
PyObject* logic_error_class = nullptr;
PyObject* oom_class = nullptr;
PyObject* cuda_error_class = nullptr;
PyObject* unsupported_class = nullptr;

// A new exception class syncmem.<name>(syncmem.Error, builtin), added to `m`.
PyObject* make_class(nb::module_& m, const char* name, PyObject* builtin, const char* doc) {
  const std::string qualified = std::string{"syncmem."} + name;
  nb::object bases = error_base == nullptr ? nb::make_tuple(nb::handle{builtin})
                                           : nb::make_tuple(nb::handle{error_base}, nb::handle{builtin});
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (cls == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle{cls};  // the module holds a reference; the class lives as long as the interpreter
  return cls;
}

}  // namespace

PyObject* logic_error_type() noexcept { return logic_error_class; }

void bind_errors(nb::module_& m) {
  error_base = make_class(m, "Error", PyExc_Exception, "Base class of the exceptions syncmem raises.");
  logic_error_class =
      make_class(m, "LogicError", PyExc_ValueError, "A bad argument or a call out of order (syncmem::logic_error).");
  oom_class = make_class(m, "OutOfMemoryError", PyExc_MemoryError,
                         "An allocation failed; the message says what was asked, on which device, and what is free, "
                         "cached and in use (syncmem::out_of_memory).");
  cuda_error_class = make_class(m, "CudaError", PyExc_RuntimeError,
                                "A CUDA call failed; the message names the call and the error (syncmem::cuda_error).");
  unsupported_class = make_class(m, "UnsupportedError", PyExc_RuntimeError,
                                 "Something this build or machine cannot do, e.g. no device is available "
                                 "(syncmem::unsupported_error).");

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const syncmem::logic_error& e) {
      PyErr_SetString(logic_error_class, e.what());
    } catch (const syncmem::out_of_memory& e) {
      PyErr_SetString(oom_class, e.what());
    } catch (const syncmem::cuda_error& e) {
      PyErr_SetString(cuda_error_class, e.what());
    } catch (const syncmem::unsupported_error& e) {
      PyErr_SetString(unsupported_class, e.what());
    }
  });
}

}  // namespace syncmem::python
