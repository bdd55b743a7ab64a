// syncmem's exceptions as Python exceptions with the same messages. Each
// derives from syncmem.Error and from the built-in exception a Python caller
// already catches for that kind of failure:
//
//   syncmem::logic_error        syncmem.LogicError        (ValueError)
//   syncmem::out_of_memory      syncmem.OutOfMemoryError  (MemoryError)
//   syncmem::device_error       syncmem.DeviceError       (RuntimeError)
//   syncmem::cuda_error         syncmem.CudaError         (syncmem.DeviceError)
//   syncmem::system_error       syncmem.SystemCallError   (OSError, with errno)
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
PyObject* device_error_class = nullptr;
PyObject* cuda_error_class = nullptr;
PyObject* system_error_class = nullptr;
PyObject* unsupported_class = nullptr;

// A new exception class syncmem.<name>(syncmem.Error, builtin), added to `m`;
// with `parent`, syncmem.<name>(parent) instead.
PyObject* make_class(nb::module_& m, const char* name, PyObject* builtin, const char* doc, PyObject* parent = nullptr) {
  const std::string qualified = std::string{"syncmem."} + name;
  nb::object bases = parent != nullptr       ? nb::make_tuple(nb::handle{parent})
                     : error_base == nullptr ? nb::make_tuple(nb::handle{builtin})
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
  device_error_class =
      make_class(m, "DeviceError", PyExc_RuntimeError, "A call into a device backend failed (syncmem::device_error).");
  cuda_error_class = make_class(m, "CudaError", PyExc_RuntimeError,
                                "A CUDA call failed; the message names the call and the error (syncmem::cuda_error).",
                                device_error_class);
  system_error_class =
      make_class(m, "SystemCallError", PyExc_OSError,
                 "The operating system refused a call, e.g. mmap; errno says why (syncmem::system_error).");
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
    } catch (const syncmem::device_error& e) {
      PyErr_SetString(device_error_class, e.what());
    } catch (const syncmem::system_error& e) {
      // OSError(errno, text) sets the exception's errno attribute.
      PyObject* args = Py_BuildValue("(is)", e.code().value(), e.what());
      if (args != nullptr) {
        PyErr_SetObject(system_error_class, args);
        Py_DECREF(args);
      }
    } catch (const syncmem::unsupported_error& e) {
      PyErr_SetString(unsupported_class, e.what());
    }
  });
}

}  // namespace syncmem::python
