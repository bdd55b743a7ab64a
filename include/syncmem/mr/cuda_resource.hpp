#pragma once

/// @file mr/cuda_resource.hpp
/// @brief cuda_resource, a device_resource for CUDA devices only (declared in device_resource.hpp).

#include "syncmem/mr/device_resource.hpp"
