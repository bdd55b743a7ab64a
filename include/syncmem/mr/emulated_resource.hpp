#pragma once

/// @file mr/emulated_resource.hpp
/// @brief emulated_resource, a device_resource for emulated devices only (declared in device_resource.hpp).

#include "syncmem/mr/device_resource.hpp"
