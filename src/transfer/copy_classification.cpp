// Classifying a copy: what kind of memory each side is (as the backend of
// the copy's stream sees it), the checks copy_async makes of them, and which
// path of copy_paths.hpp a copy of two classified sides takes (the table in
// docs/transfers.md).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"
#include "transfer/copy_internal.hpp"
#include "transfer/copy_paths.hpp"

namespace syncmem::detail {

namespace {

using side = copy_side;

std::string describe(const side& s) {
  if (s.kind == memory_kind::device) return fmt::format("device memory of {}", to_string(*s.device));
  return fmt::format("{} memory", to_string(s.kind));
}

bool is_host(const side& s) { return s.kind == memory_kind::pageable_host || s.kind == memory_kind::pinned_host; }

// A copy on a stream being captured into a graph: recorded as one node where
// the backend copies it alone (pinned host, device and managed memory of the
// stream's device, or a peer), refused where the engine needs its host
// threads, staging buffers or a wait for the stream, none of which a graph
// can replay. The transfer has nothing to wait for: the copy runs at launch.
transfer captured(void* dst, const side& to, const void* src, const side& from, std::size_t bytes, stream_view s,
                  const copy_options& o) {
  const bool recordable = [&] {
    if (is_host(to) && is_host(from)) return false;
    if (to.kind == memory_kind::pageable_host || from.kind == memory_kind::pageable_host) return false;
    if (to.kind == memory_kind::device && from.kind == memory_kind::device && *to.device != *from.device) {
      return to.device->kind() == from.device->kind() && o.peer_access && peer_usable(*from.device, *to.device);
    }
    return true;
  }();
  if (!recordable) {
    SYNCMEM_UNSUPPORTED(fmt::format(
        "copy_async: the stream of {} is being captured into a graph, and a copy of {} bytes from {} to {} cannot "
        "be captured (it needs host threads, staging buffers or a wait for the stream); only copies between pinned "
        "host, device and managed memory (or between peers) can; nothing was captured",
        to_string(s.device()), bytes, describe(from), describe(to)));
  }
  enqueue_copy(dst, src, bytes, s);
  const bool peer = to.kind == memory_kind::device && from.kind == memory_kind::device && *to.device != *from.device;
  return transfer_complete(peer ? copy_path::peer_dma : copy_path::dma);
}

// The path of a copy the backend makes by itself, one DMA on the stream
// (between device, pinned and managed memory, or between peers); nullopt for
// the copies that need the engine or a host thread.
std::optional<copy_path> backend_copies_alone(const side& to, const side& from, const copy_options& o) {
  const auto alone = [](const side& s) { return is_direct_kind(s.kind) || s.kind == memory_kind::managed; };
  if (!alone(to) || !alone(from) || (is_host(to) && is_host(from))) return std::nullopt;
  if (to.kind != memory_kind::device || from.kind != memory_kind::device || *to.device == *from.device) {
    return copy_path::dma;
  }
  if (to.device->kind() == from.device->kind() && o.peer_access && peer_usable(*from.device, *to.device)) {
    return copy_path::peer_dma;
  }
  return std::nullopt;
}

}  // namespace

// The kind of `p` as the backend of the copy's stream sees it: memory the
// emulated backend pinned is pageable to CUDA.
side classify_pointer(const void* p, device_kind backend) {
  const auto owner = find_pointer_owner(p);
  if (!owner) return {};
  const pointer_attributes& a = owner->attributes;
  if (a.kind == memory_kind::device) return {memory_kind::device, a.device, a.base, a.size};
  if (owner->kind == backend || backend_for(owner->kind).traits().pins_for_all_backends) {
    return {a.kind, std::nullopt, a.base, a.size};
  }
  return {memory_kind::pageable_host, std::nullopt, a.base, a.size};
}

memory_kind host_memory_kind_for(const void* p, device_kind backend) { return classify_pointer(p, backend).kind; }

void check_copy_extent(const void* p, std::size_t bytes, const side& s, const char* which) {
  if (s.size == 0) return;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const auto base = reinterpret_cast<std::uintptr_t>(s.base);
  const std::size_t available = base + s.size - address;
  SYNCMEM_EXPECTS(bytes <= available,
                  fmt::format("copy_async: the {} range [{}, +{}) runs {} bytes past the end of its allocation "
                              "({}, [{}, +{}))",
                              which, p, bytes, bytes - available, describe(s), s.base, s.size));
}

void check_copy_stream(stream_view stream, const side& dst, const side& src) {
  const device_id sd = stream.device();
  check_device(sd);
  if ((src.kind == memory_kind::managed || dst.kind == memory_kind::managed) &&
      !backend_for(sd).traits().copies_managed_memory) {
    SYNCMEM_FAIL(fmt::format("copy_async: managed memory needs a stream of a CUDA device, not {}", to_string(sd)));
  }
  if (!src.device && !dst.device) return;  // host memory alone: any device's stream
  if (src.device == sd || dst.device == sd) return;
  const device_id first = src.device ? *src.device : *dst.device;
  SYNCMEM_FAIL(fmt::format("copy_async: the stream belongs to {}, but the copy is from {} to {}; use a stream of {}",
                           to_string(sd), describe(src), describe(dst),
                           src.device && dst.device && *src.device != *dst.device
                               ? fmt::format("{} or {}", to_string(*src.device), to_string(*dst.device))
                               : to_string(first)));
}

bool stream_capturing(stream_view s) {
  device_guard guard{s.device()};
  return backend_for(s.device()).stream_capturing(s.device().index(), s.handle());
}

// The path for two classified sides (see the table in copy.hpp).
transfer dispatch_copy(void* dst, const side& to, const void* src, const side& from, std::size_t bytes,
                       stream_view stream, const copy_options& options, const staging_thresholds& thresholds) {
  auto* out = static_cast<std::byte*>(dst);
  const auto* in = static_cast<const std::byte*>(src);
  if (const auto path = backend_copies_alone(to, from, options)) {
    // The same copy whether or not the stream is being captured, so it goes
    // first: the capture query then costs a small copy no latency.
    enqueue_copy(dst, src, bytes, stream);
    if (stream_capturing(stream)) return transfer_complete(*path);  // runs at the graph's launch
    return transfer_after(stream, *path);
  }
  if (stream_capturing(stream)) return captured(dst, to, src, from, bytes, stream, options);
  if (is_host(to) && is_host(from)) return host_to_host(dst, src, bytes, stream, options);
  if (to.kind == memory_kind::managed || from.kind == memory_kind::managed) {
    return direct(dst, src, bytes, stream, copy_path::dma);
  }
  if (to.kind == memory_kind::device && from.kind == memory_kind::device) {
    if (*to.device == *from.device) return direct(dst, src, bytes, stream, copy_path::dma);
    if (to.device->kind() != from.device->kind()) {
      return across_backends(out, in, bytes, stream, *from.device, *to.device, options);
    }
    if (options.peer_access && peer_usable(*from.device, *to.device)) {
      return direct(dst, src, bytes, stream, copy_path::peer_dma);
    }
    return staged_between_devices(out, in, bytes, stream, *from.device, *to.device, options);
  }
  if (from.kind == memory_kind::device) {  // to host
    if (to.kind == memory_kind::pinned_host) return direct(dst, src, bytes, stream, copy_path::dma);
    if (bytes <= options.direct_threshold) return direct_to_pageable(dst, src, bytes, stream);
    return staged_to_host(out, in, bytes, stream, options, thresholds);
  }
  // from host to device
  if (from.kind == memory_kind::pinned_host) return direct(dst, src, bytes, stream, copy_path::dma);
  if (bytes <= options.direct_threshold) return direct_from_pageable(dst, src, bytes, stream);
  return staged_to_device(out, in, bytes, stream, options, thresholds);
}

transfer copy_sides(void* dst, const copy_side& to, const void* src, const copy_side& from, std::size_t bytes,
                    stream_view stream, const copy_options& options) {
  if (bytes == 0) return {};
  return dispatch_copy(dst, to, src, from, bytes, stream, options, staging_thresholds{});
}

}  // namespace syncmem::detail
