// DLPack 1.x both ways and __cuda_array_interface__ v3.
//
// Export. A tensor of a CUDA device exports its device side (kDLCUDA), or its
// host side when the consumer asks for dl_device=(kDLCPU, 0); a tensor of an
// emulated device exports its host side only (kDLCPU): its "device" memory is
// host memory that only syncmem's streams may touch. The capsule's context
// holds a syncmem::tensor sharing the storage, so the memory lives until the
// consumer calls the deleter. A writable export marks the exported side as
// the newest (writes through it are then seen by syncmem); a read-only export
// does not, and says so in the flags.
//
// Import. from_dlpack borrows the producer's memory as the host or device
// side of a new synced_memory. The keep-alive given to syncmem holds the
// producer object and the capsule's deleter; syncmem drops it once its last
// queued use of the memory has completed, on a thread of its own, which takes
// the GIL to call the deleter.

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/per_kind.hpp"
#include "bindings.hpp"
#include "core/deferred_release.hpp"
#include "dlpack.hpp"
#include "py_stream.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/npy.hpp"
#include "syncmem/synced_memory.hpp"
#include "syncmem/tensor.hpp"

namespace syncmem::python {

std::atomic<bool> python_exiting{false};

namespace {

using namespace nb::literals;
namespace dl = dlpack;

dl::data_type to_dl(syncmem::dtype t) {
  switch (t) {
    case syncmem::dtype::bool_:
      return {dl::bool_, 8, 1};
    case syncmem::dtype::int8:
      return {dl::int_, 8, 1};
    case syncmem::dtype::uint8:
      return {dl::uint, 8, 1};
    case syncmem::dtype::int16:
      return {dl::int_, 16, 1};
    case syncmem::dtype::int32:
      return {dl::int_, 32, 1};
    case syncmem::dtype::int64:
      return {dl::int_, 64, 1};
    case syncmem::dtype::float16:
      return {dl::float_, 16, 1};
    case syncmem::dtype::bfloat16:
      return {dl::bfloat, 16, 1};
    case syncmem::dtype::float32:
      return {dl::float_, 32, 1};
    case syncmem::dtype::float64:
      return {dl::float_, 64, 1};
  }
  throw logic_error{"syncmem: unknown dtype"};
}

std::optional<syncmem::dtype> from_dl(dl::data_type d) {
  for (const syncmem::dtype t : all_dtypes) {
    const dl::data_type x = to_dl(t);
    if (x.code == d.code && x.bits == d.bits && x.lanes == d.lanes) return t;
  }
  return std::nullopt;
}

std::string describe(dl::data_type d) {
  static constexpr const char* codes[] = {"int", "uint", "float", "opaque handle", "bfloat", "complex", "bool"};
  const std::string code = d.code < std::size(codes) ? codes[d.code] : "code " + std::to_string(d.code);
  return code + std::to_string(d.bits) + (d.lanes == 1 ? "" : " x" + std::to_string(d.lanes) + " lanes");
}

// Compact row-major strides, in elements.
std::vector<std::int64_t> row_major_strides(std::span<const std::int64_t> extents) {
  std::vector<std::int64_t> strides(extents.size());
  std::int64_t step = 1;
  for (std::size_t i = extents.size(); i-- > 0;) {
    strides[i] = step;
    step *= extents[i] > 0 ? extents[i] : 1;
  }
  return strides;
}

// ---- export -----------------------------------------------------------------------

// One allocation per capsule: the managed tensor and what it points into.
template <class Managed>
struct export_holder {
  Managed managed{};
  tensor keep;  // shares the storage: the memory lives until the consumer's deleter
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;

  static void deleter(Managed* self) { delete static_cast<export_holder*>(self->manager_ctx); }
};

// The destructor of a capsule nobody consumed: the producer frees it.
template <class Managed>
void capsule_destructor(PyObject* capsule) noexcept {
  constexpr bool versioned = std::is_same_v<Managed, dl::managed_tensor_versioned>;
  const char* name = versioned ? dl::versioned_capsule_name : dl::capsule_name;
  if (!PyCapsule_IsValid(capsule, name)) return;  // renamed "used_...": the consumer owns it
  auto* m = static_cast<Managed*>(PyCapsule_GetPointer(capsule, name));
  if (m != nullptr && m->deleter != nullptr) m->deleter(m);
}

enum class side { host, device };

// The DLPack device type of each kind's device memory; none where a tensor
// exports its host side only (no DLPack consumer knows emulated devices).
std::optional<std::int32_t> dl_device_type(device_kind kind) {
  static_assert(device_kind_count == 2, "a new device kind needs its DLPack device type here");
  static const syncmem::detail::per_kind<std::optional<std::int32_t>> table{{{dl::cuda, std::nullopt}}};
  return table[kind];
}

// The side a tensor exports when the consumer names no dl_device.
side natural_side(const tensor& t) { return dl_device_type(t.device().kind()) ? side::device : side::host; }

std::pair<std::int32_t, std::int32_t> dl_device_of(const tensor& t, side s) {
  if (s == side::host) return {dl::cpu, 0};
  return {*dl_device_type(t.device().kind()), t.device().index()};
}

side requested_side(const tensor& t, nb::handle dl_device) {
  if (dl_device.is_none()) return natural_side(t);
  const auto [type, id] = nb::cast<std::pair<std::int32_t, std::int32_t>>(dl_device);
  if (type == dl::cpu) return side::host;
  const std::optional<std::int32_t> device_type = dl_device_type(t.device().kind());
  if (device_type && type == *device_type && id == t.device().index()) return side::device;
  if (!device_type)
    throw nb::buffer_error(("syncmem: a tensor of " + to_string(t.device()) +
                            " exports its host side only (dl_device=(1, 0), kDLCPU); (" + std::to_string(type) + ", " +
                            std::to_string(id) + ") was asked")
                               .c_str());
  throw nb::buffer_error(("syncmem: a tensor of " + to_string(t.device()) + " exports to (2, " +
                          std::to_string(t.device().index()) + ") (its device side) or (1, 0) (its host side), not (" +
                          std::to_string(type) + ", " + std::to_string(id) + ")")
                             .c_str());
}

// The stream the consumer will use the device side on (DLPack: None is the
// legacy default stream, -1 asks for no synchronisation).
stream_view export_stream(const tensor& t, nb::handle stream) {
  if (stream.is_none()) return default_stream(t.device());
  if (PyLong_Check(stream.ptr()) && nb::cast<std::int64_t>(stream) == -1) return default_stream(t.device());
  return to_stream(stream, t.device());
}

template <class Managed>
nb::object make_capsule(tensor t, side s, nb::handle stream, bool read_only, std::uint64_t flags) {
  auto holder = std::make_unique<export_holder<Managed>>();
  void* data = nullptr;
  if (s == side::host) {
    if (!stream.is_none() && !(PyLong_Check(stream.ptr()) && nb::cast<std::int64_t>(stream) == -1)) {
      if (!nb::isinstance<py_stream>(stream))
        throw nb::buffer_error("syncmem: a host-side (kDLCPU) export takes stream=None");
      (void)to_stream(stream, t.device());  // a stream of another device is refused by name
    }
    nb::gil_scoped_release unlocked;
    data = read_only ? const_cast<void*>(t.host_data()) : t.mutable_host_data();
  } else {
    const stream_view on = export_stream(t, stream);
    nb::gil_scoped_release unlocked;
    data = read_only ? const_cast<void*>(t.device_data(on)) : t.mutable_device_data(on);
  }
  const auto extents = t.shape().extents();
  holder->shape.assign(extents.begin(), extents.end());
  holder->strides = row_major_strides(extents);
  const auto [type, id] = dl_device_of(t, s);
  holder->keep = std::move(t);

  Managed& m = holder->managed;
  m.tensor = dl::dl_tensor{.data = data,
                           .device = {type, id},
                           .ndim = static_cast<std::int32_t>(holder->shape.size()),
                           .dtype = to_dl(holder->keep.dtype()),
                           .shape = holder->shape.data(),
                           .strides = holder->strides.data(),
                           .byte_offset = 0};
  m.manager_ctx = holder.get();
  m.deleter = &export_holder<Managed>::deleter;
  constexpr bool versioned = std::is_same_v<Managed, dl::managed_tensor_versioned>;
  if constexpr (versioned) {
    m.version = dl::produced_version;
    m.flags = flags | (read_only ? dl::flag_read_only : 0);
  }
  PyObject* capsule =
      PyCapsule_New(&m, versioned ? dl::versioned_capsule_name : dl::capsule_name, &capsule_destructor<Managed>);
  if (capsule == nullptr) throw nb::python_error();
  (void)holder.release();  // the capsule owns it now
  return nb::steal(capsule);
}

nb::object export_tensor(const tensor& t, nb::handle stream, nb::handle max_version, nb::handle dl_device,
                         nb::handle copy, bool read_only) {
  bool versioned = false;
  if (!max_version.is_none()) {
    const auto [major, minor] = nb::cast<std::pair<int, int>>(max_version);
    (void)minor;
    versioned = major >= 1;
  }
  if (read_only && !versioned)
    throw nb::buffer_error("syncmem: a read-only export needs a versioned capsule (max_version >= (1, 0))");
  const side s = requested_side(t, dl_device);
  const bool make_copy = !copy.is_none() && nb::cast<bool>(copy);
  // copy=False needs nothing: either side is the tensor's own memory.
  tensor source = t;
  std::uint64_t flags = 0;
  if (make_copy) {
    nb::gil_scoped_release unlocked;
    source = t.clone();
    flags |= dl::flag_is_copied;
  }
  if (versioned) return make_capsule<dl::managed_tensor_versioned>(std::move(source), s, stream, read_only, flags);
  return make_capsule<dl::managed_tensor>(std::move(source), s, stream, read_only, flags);
}

// ---- import -----------------------------------------------------------------------

// Owns a consumed capsule's tensor and the producer object; destroyed when
// syncmem lets go of the borrowed memory, possibly on a thread of its own.
struct import_owner {
  dl::managed_tensor* legacy = nullptr;
  dl::managed_tensor_versioned* versioned = nullptr;
  PyObject* producer = nullptr;  // a strong reference, or null

  import_owner() = default;
  import_owner(const import_owner&) = delete;
  import_owner& operator=(const import_owner&) = delete;
  ~import_owner() {
    // Past interpreter exit the deleter may need what is gone: the memory is
    // left to the process's end.
    if (python_exiting.load() || !Py_IsInitialized()) return;
    const PyGILState_STATE gil = PyGILState_Ensure();
    if (versioned != nullptr && versioned->deleter != nullptr) versioned->deleter(versioned);
    if (legacy != nullptr && legacy->deleter != nullptr) legacy->deleter(legacy);
    Py_XDECREF(producer);
    PyGILState_Release(gil);
  }
};

tensor import_capsule(nb::handle capsule_handle, nb::handle producer, nb::handle device_arg, nb::handle copy) {
  PyObject* capsule = capsule_handle.ptr();
  if (!PyCapsule_CheckExact(capsule))
    throw nb::type_error("syncmem.from_dlpack: __dlpack__ did not return a PyCapsule");
  const bool versioned = PyCapsule_IsValid(capsule, dl::versioned_capsule_name) != 0;
  if (!versioned && PyCapsule_IsValid(capsule, dl::capsule_name) == 0) {
    if (PyCapsule_IsValid(capsule, dl::used_capsule_name) != 0 ||
        PyCapsule_IsValid(capsule, dl::used_versioned_capsule_name) != 0)
      throw nb::buffer_error("syncmem.from_dlpack: this DLPack capsule was already consumed (a capsule is used once)");
    throw nb::type_error(
        "syncmem.from_dlpack: not a DLPack capsule (its name is not 'dltensor' or 'dltensor_versioned')");
  }
  dl::managed_tensor_versioned* mv = nullptr;
  dl::managed_tensor* ml = nullptr;
  const dl::dl_tensor* dt = nullptr;
  std::uint64_t flags = 0;
  if (versioned) {
    mv = static_cast<dl::managed_tensor_versioned*>(PyCapsule_GetPointer(capsule, dl::versioned_capsule_name));
    if (mv == nullptr) throw nb::python_error();
    if (mv->version.major != 1)
      throw nb::buffer_error(("syncmem.from_dlpack: DLPack " + std::to_string(mv->version.major) + "." +
                              std::to_string(mv->version.minor) + " is not supported (syncmem reads 1.x)")
                                 .c_str());
    dt = &mv->tensor;
    flags = mv->flags;
  } else {
    ml = static_cast<dl::managed_tensor*>(PyCapsule_GetPointer(capsule, dl::capsule_name));
    if (ml == nullptr) throw nb::python_error();
    dt = &ml->tensor;
  }

  // Everything is checked before the capsule is consumed: a refused capsule
  // stays its producer's, freed by its destructor.
  const auto type = from_dl(dt->dtype);
  if (!type)
    throw nb::type_error(("syncmem.from_dlpack: dtype " + describe(dt->dtype) +
                          " is not supported; syncmem's dtypes are bool, int8, uint8, int16, int32, int64, float16, "
                          "bfloat16, float32, float64")
                             .c_str());
  if (dt->ndim < 0) throw nb::buffer_error("syncmem.from_dlpack: negative ndim");
  std::vector<std::int64_t> extents(dt->shape, dt->shape + dt->ndim);
  const bool empty = std::find(extents.begin(), extents.end(), 0) != extents.end();
  if (dt->strides != nullptr && !empty) {  // an empty tensor's strides say nothing
    const auto compact = row_major_strides(extents);
    for (std::int32_t i = 0; i < dt->ndim; ++i) {
      if (extents[i] != 1 && dt->strides[i] != compact[i]) {
        std::string given;
        for (std::int32_t j = 0; j < dt->ndim; ++j) given += (j == 0 ? "" : ", ") + std::to_string(dt->strides[j]);
        throw nb::buffer_error(("syncmem.from_dlpack: the tensor is not contiguous (strides (" + given +
                                ") in elements); syncmem tensors are compact row-major: pass a contiguous copy "
                                "(x.contiguous(), numpy.ascontiguousarray(x))")
                                   .c_str());
      }
    }
  }
  const bool host = dt->device.device_type == dl::cpu || dt->device.device_type == dl::cuda_host;
  if (!host && dt->device.device_type != dl::cuda)
    throw nb::buffer_error(("syncmem.from_dlpack: memory of DLPack device type " +
                            std::to_string(dt->device.device_type) +
                            " is not supported (kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3 are)")
                               .c_str());
  const device_id device = host ? to_device(device_arg) : device_id::cuda(dt->device.device_id);
  if (!host && !device_arg.is_none() && to_device(device_arg) != device)
    throw logic_error{"syncmem.from_dlpack: the memory is on " + to_string(device) + ", device= names " +
                      to_string(to_device(device_arg)) + "; syncmem borrows device memory where it is"};
  check_device(device);
  const bool read_only = (flags & dl::flag_read_only) != 0;
  const bool copy_given = !copy.is_none();
  if (read_only && copy_given && !nb::cast<bool>(copy))
    throw nb::buffer_error(
        "syncmem.from_dlpack: the producer's memory is read-only and copy=False; syncmem may "
        "write the memory it borrows (pass copy=None or True)");

  // Consume: from here the capsule's tensor is ours.
  if (PyCapsule_SetName(capsule, versioned ? dl::used_versioned_capsule_name : dl::used_capsule_name) != 0)
    throw nb::python_error();
  auto owner = std::make_shared<import_owner>();
  owner->versioned = mv;
  owner->legacy = ml;
  if (producer.is_valid() && !producer.is_none()) owner->producer = nb::borrow(producer).release().ptr();

  const syncmem::shape s{std::span<const std::int64_t>{extents}};
  const std::size_t nbytes = static_cast<std::size_t>(s.count()) * size_of(*type);
  void* data = static_cast<char*>(dt->data) + dt->byte_offset;
  if (nbytes == 0) return tensor{*type, s, device};  // nothing to borrow; the owner is dropped here

  synced_memory_options options;
  options.label = "from_dlpack";
  auto mem = std::make_shared<synced_memory>(nbytes, device, options);
  if (host) {
    mem->borrow_host(data, nbytes, owner);
  } else {
    mem->borrow_device(data, nbytes, owner);
  }
  owner.reset();
  tensor result{*type, s, std::move(mem), 0};
  if (read_only || (copy_given && nb::cast<bool>(copy))) {
    nb::gil_scoped_release unlocked;
    return result.clone();
  }
  return result;
}

tensor from_dlpack(nb::handle x, nb::handle device, nb::handle copy) {
  if (PyCapsule_CheckExact(x.ptr())) return import_capsule(x, nb::handle{}, device, copy);
  if (!nb::hasattr(x, "__dlpack__"))
    throw nb::type_error(("syncmem.from_dlpack: " + nb::cast<std::string>(nb::repr(x.type())) +
                          " has no __dlpack__ (pass a DLPack producer such as a numpy, torch or cupy array, or a "
                          "capsule)")
                             .c_str());
  nb::object stream = nb::none();
  if (nb::hasattr(x, "__dlpack_device__")) {
    const auto [type, id] = nb::cast<std::pair<std::int32_t, std::int32_t>>(x.attr("__dlpack_device__")());
    if (type == dl::cuda) {
      // The producer makes the memory ready on the stream syncmem first uses it on.
      const device_id d = device_id::cuda(id);
      check_device(d);
      stream = nb::int_(stream_number(default_stream(d)));
    }
  }
  nb::object capsule;
  try {
    capsule = x.attr("__dlpack__")("stream"_a = stream, "max_version"_a.none() = nb::make_tuple(1, 1));
  } catch (nb::python_error& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    capsule = x.attr("__dlpack__")("stream"_a = stream);  // a producer older than DLPack 1.0
  }
  return import_capsule(capsule, x, device, copy);
}

// ---- __cuda_array_interface__ -------------------------------------------------------

nb::dict cuda_array_interface(tensor& t) {
  if (t.device().kind() != device_kind::cuda)
    throw nb::attribute_error(("syncmem: a tensor of " + to_string(t.device()) +
                               " has no __cuda_array_interface__ (it is not CUDA memory); DLPack exports its host side")
                                  .c_str());
  const char* ts = numpy_typestr(t.dtype());
  if (ts == nullptr)
    throw nb::type_error("syncmem: bfloat16 has no __cuda_array_interface__ typestr; export it through DLPack");
  const stream_view s = default_stream(t.device());
  void* data = nullptr;
  {
    nb::gil_scoped_release unlocked;
    data = t.mutable_device_data(s);
  }
  nb::dict d;
  nb::list extents;
  for (const std::int64_t e : t.shape().extents()) extents.append(e);
  d["shape"] = nb::tuple(extents);
  d["typestr"] = ts;
  d["descr"] = nb::make_tuple(nb::make_tuple("", ts));
  d["data"] = nb::make_tuple(reinterpret_cast<std::uintptr_t>(data), false);
  d["strides"] = nb::none();
  d["version"] = 3;
  d["stream"] = stream_number(s);
  return d;
}

}  // namespace

void bind_dlpack(nb::module_& m) {
  auto cls = nb::type<tensor>();
  nb::handle tensor_class = cls;
  nb::setattr(
      tensor_class, "__dlpack__",
      nb::cpp_function([](const tensor& t, nb::handle stream, nb::handle max_version, nb::handle dl_device,
                          nb::handle copy) { return export_tensor(t, stream, max_version, dl_device, copy, false); },
                       nb::is_method(), nb::kw_only(), "stream"_a = nb::none(), "max_version"_a = nb::none(),
                       "dl_device"_a = nb::none(), "copy"_a = nb::none(),
                       "A DLPack capsule of the tensor (versioned when max_version >= (1, 0)). Writable: the exported "
                       "side becomes the newest."));
  nb::setattr(
      tensor_class, "export_dlpack",
      nb::cpp_function(
          [](const tensor& t, nb::handle stream, nb::handle max_version, nb::handle dl_device, nb::handle copy,
             bool read_only) { return export_tensor(t, stream, max_version, dl_device, copy, read_only); },
          nb::is_method(), nb::kw_only(), "stream"_a = nb::none(), "max_version"_a.none() = nb::make_tuple(1, 1),
          "dl_device"_a = nb::none(), "copy"_a = nb::none(), "read_only"_a = false,
          "As __dlpack__, with read_only: a read-only export leaves the state as it is and sets the "
          "capsule's read-only flag."));
  nb::setattr(tensor_class, "__dlpack_device__",
              nb::cpp_function(
                  [](const tensor& t) {
                    const auto [type, id] = dl_device_of(t, natural_side(t));
                    return nb::make_tuple(type, id);
                  },
                  nb::is_method(), "(2, index) for a CUDA tensor; (1, 0) for an emulated device's (its host side)."));
  nb::setattr(tensor_class, "__cuda_array_interface__",
              nb::borrow(reinterpret_cast<PyObject*>(&PyProperty_Type))(
                  nb::cpp_function([](tensor& t) { return cuda_array_interface(t); }, nb::is_method())));

  m.def("from_dlpack", &from_dlpack, "x"_a, nb::kw_only(), "device"_a = nb::none(), "copy"_a = nb::none(),
        "A syncmem.tensor borrowing a DLPack producer's memory (host memory becomes the host side of a tensor of "
        "`device`, CUDA memory the device side); the producer stays alive until syncmem's last queued use of the "
        "memory has completed. Read-only memory is copied.");

  m.def(
      "_drain_releases",
      [] {
        nb::gil_scoped_release unlocked;
        detail::drain_deferred_releases();
      },
      "Waits until every borrowed memory syncmem let go of has been released to its owner (for tests).");

  // At exit: deleters still queued run while the interpreter is whole; later
  // ones are skipped.
  nb::module_::import_("atexit").attr("register")(nb::cpp_function([] {
    {
      nb::gil_scoped_release unlocked;
      detail::drain_deferred_releases();
    }
    python_exiting.store(true);
  }));
}

}  // namespace syncmem::python
