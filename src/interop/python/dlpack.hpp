#pragma once

// The DLPack 1.x ABI (https://dmlc.github.io/dlpack/latest/c_api.html),
// written from the specification: the structs a producer and a consumer
// exchange through "dltensor" (legacy) and "dltensor_versioned" capsules.
// Layouts and values are fixed by the specification.

#include <cstdint>

namespace syncmem::python::dlpack {

struct dl_version {
  std::uint32_t major;
  std::uint32_t minor;
};

// The version syncmem produces; it reads every 1.x.
inline constexpr dl_version produced_version{1, 1};

enum device_type : std::int32_t {
  cpu = 1,
  cuda = 2,
  cuda_host = 3,  // pinned host memory
  opencl = 4,
  vulkan = 7,
  metal = 8,
  vpi = 9,
  rocm = 10,
  rocm_host = 11,
  ext_dev = 12,
  cuda_managed = 13,
  oneapi = 14,
  webgpu = 15,
  hexagon = 16,
  maia = 17,
};

struct dl_device {
  std::int32_t device_type;
  std::int32_t device_id;
};

enum type_code : std::uint8_t {
  int_ = 0,
  uint = 1,
  float_ = 2,
  opaque_handle = 3,
  bfloat = 4,
  complex = 5,
  bool_ = 6,
};

struct data_type {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct dl_tensor {
  void* data;
  dl_device device;
  std::int32_t ndim;
  data_type dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; null means compact row-major
  std::uint64_t byte_offset;
};

struct managed_tensor {  // DLManagedTensor, in "dltensor" capsules
  dl_tensor tensor;
  void* manager_ctx;
  void (*deleter)(managed_tensor* self);
};

inline constexpr std::uint64_t flag_read_only = std::uint64_t{1} << 0;
inline constexpr std::uint64_t flag_is_copied = std::uint64_t{1} << 1;

struct managed_tensor_versioned {  // DLManagedTensorVersioned, in "dltensor_versioned" capsules
  dl_version version;
  void* manager_ctx;
  void (*deleter)(managed_tensor_versioned* self);
  std::uint64_t flags;
  dl_tensor tensor;
};

inline constexpr const char* capsule_name = "dltensor";
inline constexpr const char* used_capsule_name = "used_dltensor";
inline constexpr const char* versioned_capsule_name = "dltensor_versioned";
inline constexpr const char* used_versioned_capsule_name = "used_dltensor_versioned";

}  // namespace syncmem::python::dlpack
