#include "mr/caching/device_segments.hpp"

#include <algorithm>
#include <new>

#include "core/ignored_failure.hpp"
#include "syncmem/device_guard.hpp"

namespace syncmem::mr::detail::caching {

device_segments::device_segments(device_id device, memory_resource* upstream, reservation& reserved,
                                 stream_pools& pools)
    : device_{device},
      upstream_{upstream},
      backend_{syncmem::detail::backend_for(device)},
      index_{device.index()},
      reserved_{reserved},
      pools_{pools} {}

void* device_segments::take(std::size_t size, stream_view s) {
  if (upstream_ == nullptr) {
    device_guard guard{device_};
    return backend_.allocate(index_, size);
  }
  try {
    return upstream_->allocate(size, s);
  } catch (const std::bad_alloc&) {  // out_of_memory too: handled like the device's
    return nullptr;
  }
}

void device_segments::give(void* p, std::size_t size, stream_view s) {
  if (upstream_ != nullptr) {
    upstream_->deallocate(p, size, s);
  } else {
    device_guard guard{device_};
    backend_.deallocate(index_, p, size);
  }
}

block* device_segments::grow(pool_kind kind, std::size_t size, stream_pool& pool, stream_view s) {
  if (!reserved_.admits(size)) return nullptr;
  auto seg = std::make_unique<segment>();
  block* b = pools_.blocks().make();
  void* p = nullptr;
  try {
    p = take(size, s);
  } catch (...) {
    pools_.blocks().release(b);
    throw;
  }
  if (p == nullptr) {
    pools_.blocks().release(b);
    return nullptr;
  }
  *seg = segment{reinterpret_cast<std::uintptr_t>(p), size, kind, false, s.handle(), b};
  b->ptr = seg->base;
  b->size = size;
  b->seg = seg.get();
  b->status = block_status::free;
  b->owner = &pool;
  try {
    segments_.emplace(seg->base, std::move(seg));
  } catch (...) {
    pools_.blocks().release(b);
    give(p, size, s);
    throw;
  }
  reserved_.add(size);
  reserved_.count_growth();
  observers_.added(reinterpret_cast<std::uintptr_t>(p), size);
  return b;
}

std::vector<segment*> device_segments::idle() const {
  std::vector<segment*> idle;
  for (const auto& [base, seg] : segments_) {
    bool all_free = true;
    for (const block* b = seg->first; b != nullptr && all_free; b = b->next) {
      all_free = b->status == block_status::free;
    }
    if (all_free) idle.push_back(seg.get());
  }
  std::sort(idle.begin(), idle.end(), [](const segment* a, const segment* b) { return a->size > b->size; });
  return idle;
}

std::size_t device_segments::drop(segment& seg) {
  if (upstream_ != nullptr) {
    // cudaFree waits for the device; an upstream may not: work freed on
    // streams may still use the memory.
    device_guard guard{device_};
    backend_.synchronize_device(index_);
  }
  for (block* b = seg.first; b != nullptr;) {
    block* const next = b->next;
    b->owner->index(seg.kind).remove(b);
    pools_.blocks().release(b);
    b = next;
  }
  seg.first = nullptr;
  observers_.releasing(seg.base, seg.size);
  try {
    give(reinterpret_cast<void*>(seg.base), seg.size, default_stream(device_));
  } catch (...) {
    // the device is gone
    syncmem::detail::log_ignored("giving a segment back to the device");
  }
  const std::size_t size = seg.size;
  reserved_.remove(size);
  reserved_.count_release();
  segments_.erase(seg.base);
  return size;
}

void device_segments::release_all(bool device_alive) noexcept {
  for (auto& entry : segments_) {
    auto& seg = *entry.second;
    if (device_alive) observers_.releasing(seg.base, seg.size);
    if (upstream_ == nullptr && !device_alive) continue;
    try {
      give(reinterpret_cast<void*>(seg.base), seg.size, default_stream(device_));
    } catch (...) {
      // the device is gone
      syncmem::detail::log_ignored("giving the segments back to the device");
    }
  }
  segments_.clear();
}

void device_segments::observe(std::shared_ptr<segment_observer> observer) {
  observers_.add(observer);
  for (const auto& [base, seg] : segments_) observer->segment_added(reinterpret_cast<void*>(base), seg->size);
}

void device_segments::detach_observers() noexcept {
  for (const auto& [base, seg] : segments_) observers_.releasing(base, seg->size);
  observers_.destroyed();
}

}  // namespace syncmem::mr::detail::caching
