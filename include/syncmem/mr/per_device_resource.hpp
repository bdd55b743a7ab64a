#pragma once

/// @file mr/per_device_resource.hpp
/// @brief The default device memory resource of each device, replaceable.

#include <vector>

#include "syncmem/device_id.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::mr {

/// @brief The resource syncmem allocates device memory of `device` from when no
/// other is given (synced_memory, tensors): unless replaced, a
/// caching_resource configured by SYNCMEM_ALLOC_CONF (over the base that
/// set_default_caching_options() sets). Made on first use and
/// never destroyed, so that objects destroyed after main() can still free.
/// @throws syncmem::logic_error for an invalid device, or when
///   SYNCMEM_ALLOC_CONF is malformed (the message names the bad key or value)
[[nodiscard]] memory_resource& get_per_device_resource(device_id device);

/// @brief The built-in caching_resource of `device`, typed: its statistics(),
/// snapshot(), limits and empty_cache() need no cast. It is what
/// get_per_device_resource(device) returns unless set_per_device_resource()
/// replaced that; it stays the same object (and keeps its cache) either way.
///
/// Every caching_resource is a pool of its own: a second one made with
/// `caching_resource{device}` caches beside this one and shares none of its
/// memory. That is what several pools on purpose look like (e.g. one per
/// subsystem, each with its own caching_options::limit): make them, and give
/// each to its users through synced_memory_options::device_resource or
/// set_per_device_resource(); to share the default pool, use this one.
/// @throws syncmem::logic_error for an invalid device, or when
///   SYNCMEM_ALLOC_CONF is malformed
[[nodiscard]] caching_resource& default_resource(device_id device);

/// @brief Makes `options` the base of the built-in caching resources made
/// from now on: each is made with them, with the keys SYNCMEM_ALLOC_CONF names
/// set from it (so the environment still has the last word). The base is
/// caching_options{} until this is called. Resources already made keep the
/// options they were made with; an integration that wants its own defaults
/// (syncmem.torch's) calls this before the first device allocation.
/// @returns the devices whose built-in resource was made before, with other
///   options than one made now would get (empty when the call was in time)
/// @throws syncmem::logic_error when SYNCMEM_ALLOC_CONF is malformed (the
///   base is then left as it was)
std::vector<device_id> set_default_caching_options(const caching_options& options);

/// @brief The default resource of the current device.
[[nodiscard]] memory_resource& get_current_device_resource();

/// @brief Replaces the default resource of `device` and returns the previous
/// one. `resource` must be a device resource of `device` and outlive its use
/// as the default; nullptr restores the built-in default.
/// @throws syncmem::logic_error when `resource` belongs to another device
memory_resource* set_per_device_resource(device_id device, memory_resource* resource);

}  // namespace syncmem::mr
