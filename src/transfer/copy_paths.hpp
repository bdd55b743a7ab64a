#pragma once

// The engine's copy paths (copy_paths.cpp), one function per row of the path
// table in docs/transfers.md; dispatch_copy (copy_classification.cpp) picks
// one for a copy's classified sides. Each returns the copy's transfer and
// keeps the guarantees of copy.hpp ("Semantics").

#include <cstddef>

#include "syncmem/copy.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/stream.hpp"
#include "transfer/copy_internal.hpp"

namespace syncmem::detail {

// Enqueues one DMA of the backend of `s`'s device.
void enqueue_copy(void* dst, const void* src, std::size_t bytes, stream_view s);

// Host to host, by the host threads, after waiting for `s` (a).
[[nodiscard]] transfer host_to_host(void* dst, const void* src, std::size_t bytes, stream_view s,
                                    const copy_options& o);
// One DMA on `s`, the transfer completing after it.
[[nodiscard]] transfer direct(void* dst, const void* src, std::size_t bytes, stream_view s, copy_path path);
// A small copy from pageable memory: one DMA of the backend's own.
[[nodiscard]] transfer direct_from_pageable(void* dst, const void* src, std::size_t bytes, stream_view s);
// A small copy to pageable memory, complete at return.
[[nodiscard]] transfer direct_to_pageable(void* dst, const void* src, std::size_t bytes, stream_view s);
// Pageable memory to the device through pinned staging; returns once the last DMA is enqueued.
[[nodiscard]] transfer staged_to_device(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s,
                                        const copy_options& o, const staging_thresholds& t);
// The device to pageable memory through pinned staging, complete at return.
[[nodiscard]] transfer staged_to_host(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s,
                                      const copy_options& o, const staging_thresholds& t);
// Between two devices without peer access, through pinned staging, all enqueued.
[[nodiscard]] transfer staged_between_devices(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s,
                                              device_id from, device_id to, const copy_options& o);
// Between devices of two backends, through host memory, complete at return.
[[nodiscard]] transfer across_backends(std::byte* dst, const std::byte* src, std::size_t bytes, stream_view s,
                                       device_id from, device_id to, const copy_options& o);

}  // namespace syncmem::detail
