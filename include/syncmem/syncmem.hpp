#pragma once

/// @file syncmem.hpp
/// @brief Everything public and backend-neutral (no CUDA header needed).

#include "syncmem/blob.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/dtype.hpp"
#include "syncmem/emulated.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/npy.hpp"
#include "syncmem/shape.hpp"
#include "syncmem/stream.hpp"
#include "syncmem/tensor.hpp"
#include "syncmem/version.hpp"
