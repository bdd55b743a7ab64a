// Giving memory back from the growable range: counting idle pages, unmapping
// them or moving their memory to where a growth needs it, and settling what
// was moved once the streams that freed it have passed (see growable_range.hpp).

#include <algorithm>
#include <exception>
#include <utility>

#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "mr/caching/growable_range.hpp"
#include "syncmem/device_guard.hpp"

namespace syncmem::mr::detail::caching {

// `keep`: the free blocks a growth extends or joins are not counted, nor taken.
// With `across`, free blocks side by side count as one, whatever their pools,
// as unmap_idle merges them once the device is idle (not while a capture may
// still use memory freed on its stream).
std::size_t growable_range::idle_pages(const placement* keep, bool across) const noexcept {
  auto kept = [keep](const block* b) { return keep != nullptr && (b == keep->extended || b == keep->joined); };
  auto idle = [&kept](const block* b) { return b != nullptr && b->status == block_status::free && !kept(b); };
  std::size_t bytes = 0;
  for (const block* b = range_->first; b != nullptr; b = b->next) {
    if (!idle(b)) continue;
    const std::uintptr_t start = b->ptr;
    while (across && idle(b->next)) b = b->next;
    bytes += movable(start, b->end()).bytes();
  }
  return bytes;
}

std::size_t growable_range::reclaim(std::size_t wanted, bool keep_handles) {
  return unmap_idle(wanted, keep_handles, nullptr, victims::top_down);
}

// The free blocks with pages to give, in the order they give them.
std::vector<block*> growable_range::candidates(const placement* keep, victims order) const {
  std::vector<block*> found;
  for (block* b = range_->first; b != nullptr; b = b->next) {
    if (b->status != block_status::free) continue;
    if (keep != nullptr && (b == keep->extended || b == keep->joined)) continue;
    if (movable(b).bytes() == 0) continue;
    found.push_back(b);
  }
  // top_down: memory stays packed at the range's start.
  std::reverse(found.begin(), found.end());
  if (order == victims::smallest_first) {
    std::stable_sort(found.begin(), found.end(), [](const block* a, const block* b) { return a->size < b->size; });
  }
  return found;
}

// With nothing wanted it still unmaps the old places of moved pages, and
// releases the handles let go meanwhile (empty_cache, trim, running out).
std::size_t growable_range::unmap_idle(std::size_t wanted, bool keep_handles, const placement* keep, victims order) {
  if (range_ == nullptr || (wanted == 0 && moving_.empty())) return 0;
  const bool captures = syncmem::detail::captures_open();
  if (moving_.empty() && idle_pages(keep, !captures) < page_size_) return 0;
  {
    // Free pages may still be used by work enqueued before their free.
    device_guard guard{device_};
    backend_.synchronize_device(index_);
  }
  const std::size_t let_go = settle(/*device_idle=*/true);
  if (!captures) merge_free_neighbours(keep);
  std::size_t done = 0;
  // A block is only split or released by its own turn, so the candidates
  // after it stay valid.
  for (block* b : candidates(keep, order)) {
    if (done >= wanted) break;
    done += unmap_pages(b, wanted - done, keep_handles);
  }
  return keep_handles ? done : done + let_go;
}

// Takes up to `wanted` bytes of idle pages for a growth of `pool` without
// waiting for the device: their handles become spares, to be mapped where the
// growth places them, while their old place stays mapped, as a moving
// stretch, until the work enqueued before now has passed. Work that may still
// use them is on the streams of the pools they were free in; the growing
// stream waits for that work, so that what it does with the new block comes
// after it. Free blocks of different pools are not merged (that needs the
// device idle), so a page two of them share stays.
std::size_t growable_range::move_idle(std::size_t wanted, const placement& keep, victims order,
                                      const stream_pool& pool) {
  // A growth too small for large pages maps pages only: a large page moved
  // there would be let go while still mapped at its old place.
  const bool pages_only = keep.need < large_page_growth;
  std::vector<std::pair<block*, std::size_t>> taken;  // each block, and what was still wanted at its turn
  std::vector<const stream_pool*> owners;
  std::size_t planned = 0;
  for (block* b : candidates(&keep, order)) {
    if (planned >= wanted) break;
    const stretch s = movable(b);
    const std::size_t bytes = s.end - cut_from_end(s, wanted - planned, pages_only).start;
    if (bytes == 0) continue;
    taken.emplace_back(b, wanted - planned);
    planned += bytes;
    if (std::find(owners.begin(), owners.end(), b->owner) == owners.end()) owners.push_back(b->owner);
  }
  if (taken.empty()) return 0;
  for (const stream_pool* o : owners) {
    if (o == &pool || o->kind == stream_pool::role::idle) continue;
    if (o->kind == stream_pool::role::live) {
      events_.order_after(o->stream, pool.stream);
    } else {
      events_.wait(pool.stream, o->retire_event);
    }
  }
  moving_.reserve(moving_.size() + 1);
  move_out m;
  m.stretches.reserve(taken.size());
  m.passed = events_.record_on(pool.stream);
  moving_.push_back(std::move(m));
  std::size_t done = 0;
  for (const auto& [b, want] : taken) done += move_pages(b, want, pages_only, moving_.back().stretches);
  return done;
}

// Once the device is idle, free memory serves any stream: a free block next
// to a free block of another pool joins that pool, merged with it, so that a
// page the two share can move. Blocks a growth keeps, and their neighbours,
// stay as they are (merging could take their records).
void growable_range::merge_free_neighbours(const placement* keep) noexcept {
  auto kept = [keep](const block* b) {
    return b != nullptr && keep != nullptr && (b == keep->extended || b == keep->joined);
  };
  auto free = [](const block* b) { return b != nullptr && b->status == block_status::free; };
  for (block* b = range_->first; b != nullptr;) {
    block* const n = b->next;
    if (!free(b) || !free(n) || n->owner == b->owner || kept(b) || kept(n) || kept(n->next)) {
      b = n;
      continue;
    }
    n->owner->large.remove(n);
    b = pools_.free_block(n, *b->owner);  // merges into b, and with what follows of b's pool
  }
}

growable_range::cut growable_range::cut_from_end(const stretch& s, std::size_t wanted, bool pages_only) const noexcept {
  cut c{s.end, 0};
  while (c.start > s.start && s.end - c.start < wanted) {
    const std::size_t slot = slot_of(c.start - page_size_);
    if (pages_only && large_[slot]) break;
    c.start = large_[slot] ? large_start(slot) : c.start - page_size_;
    ++c.units;
  }
  return c;
}

// Unmaps the pages at the end of b's movable stretch, large pages whole,
// until `wanted` bytes (or the stretch) are unmapped.
std::size_t growable_range::unmap_pages(block* b, std::size_t wanted, bool keep_handles) {
  const stretch s = movable(b);
  if (s.bytes() == 0) return 0;
  const auto [start, units] = cut_from_end(s, wanted, /*pages_only=*/false);
  // The guard, every record and slot first, so that nothing fails once pages are unmapped.
  device_guard guard{device_};
  backend_.make_current(index_);
  block* const middle = cut_out(b, start, s.end, keep_handles ? units : 0);
  for (std::uintptr_t at = start; at < s.end;) {
    const bool large = large_[slot_of(at)];
    unmap_unit(at, keep_handles);
    at += (large ? large_pages_ : 1) * page_size_;
  }
  add_unmapped(middle);
  reserved_.count_release();
  return s.end - start;
}

// Takes the pages at the end of b's movable stretch, as unmap_pages does, but
// leaves them mapped there: their handles become spares and their old place a
// moving stretch, added to `stretches` (room reserved by the caller).
std::size_t growable_range::move_pages(block* b, std::size_t wanted, bool pages_only, std::vector<block*>& stretches) {
  const stretch s = movable(b);
  const auto [start, units] = cut_from_end(s, wanted, pages_only);
  if (units == 0) return 0;
  block* const middle = cut_out(b, start, s.end, units);
  middle->status = block_status::moving;
  for (std::uintptr_t at = start; at < s.end;) {
    const std::size_t slot = slot_of(at);
    const bool large = large_[slot];
    (large ? spare_large_ : spare_pages_).push_back(pages_[slot]);  // room reserved by cut_out
    at += (large ? large_pages_ : 1) * page_size_;
  }
  stretches.push_back(middle);
  orphans_.reserve(orphans_.size() + spare_pages_.size() + spare_large_.size());  // release_spares cannot fail
  reserved_.count_release();
  return s.end - start;
}

// Unmaps the old places of moved pages whose earlier work has passed (all of
// them when the device is idle), then releases the handles let go meanwhile
// that are mapped nowhere else; returns their bytes.
std::size_t growable_range::settle(bool device_idle) {
  // While a capture is open, an event query could invalidate it; this waits.
  if (moving_.empty() || (!device_idle && syncmem::detail::captures_open())) return 0;
  for (std::size_t i = 0; i < moving_.size();) {
    move_out& m = moving_[i];
    if (!device_idle && !events_.passed(m.passed)) {
      ++i;
      continue;
    }
    {
      device_guard guard{device_};
      backend_.make_current(index_);
      for (block* b : m.stretches) unmap_moved(b);
    }
    m.stretches.clear();
    events_.put(m.passed);
    moving_[i] = std::move(moving_.back());
    moving_.pop_back();
  }
  if (orphans_.empty()) return 0;
  device_guard guard{device_};
  std::size_t released = 0;
  std::erase_if(orphans_, [this, &released](const std::pair<handle, std::size_t>& o) {
    if (still_mapped_elsewhere(o.first)) return false;
    vmm_->release(index_, o.first, o.second);
    reserved_.remove(o.second);
    released += o.second;
    return true;
  });
  return released;
}

// Unmaps a moving stretch, which becomes a hole (its handles are mapped elsewhere, or orphans).
void growable_range::unmap_moved(block* b) {
  observers_.unmapping(b->ptr, b->size);
  for (std::uintptr_t at = b->ptr; at < b->end();) {
    const std::size_t first = slot_of(at);
    const std::size_t n = large_[first] ? large_pages_ : 1;
    vmm_->unmap(index_, reinterpret_cast<void*>(at), n * page_size_);
    for (std::size_t i = first; i < first + n; ++i) {
      pages_[i] = 0;
      large_[i] = false;
    }
    mapped_pages_ -= n;
    at += n * page_size_;
  }
  b->status = block_status::unmapped;
  add_unmapped(b);
}

bool growable_range::still_mapped_elsewhere(handle h) const noexcept {
  for (const move_out& m : moving_) {
    for (const block* b : m.stretches) {
      for (std::size_t i = slot_of(b->ptr); i < slot_of(b->end()); ++i) {
        if (pages_[i] == h) return true;
      }
    }
  }
  return false;
}

// Cuts [start, aligned_end) out of the free block `b` as an unmapped block,
// which it returns; what is left on either side stays free in b's pool.
block* growable_range::cut_out(block* b, std::uintptr_t start, std::uintptr_t aligned_end, std::size_t spares) {
  const std::uintptr_t end = b->end();
  block* middle = pools_.blocks().make();
  block* tail = nullptr;
  try {
    if (end > aligned_end) tail = pools_.blocks().make();
    spare_pages_.reserve(spare_pages_.size() + spares);
    spare_large_.reserve(spare_large_.size() + spares);
  } catch (...) {
    pools_.blocks().release(middle);
    throw;
  }
  stream_pool& owner = *b->owner;
  owner.large.remove(b);
  middle->ptr = start;
  middle->size = aligned_end - start;
  middle->seg = range_.get();
  middle->status = block_status::unmapped;
  link_after(b, middle);
  if (tail != nullptr) {
    tail->ptr = aligned_end;
    tail->size = end - aligned_end;
    tail->seg = range_.get();
    tail->owner = &owner;
    link_after(middle, tail);
    owner.large.insert(tail);
  }
  if (start > b->ptr) {
    b->size = start - b->ptr;
    owner.large.insert(b);
  } else {
    unlink_from_segment(b);
    pools_.blocks().release(b);
  }
  return middle;
}

// Unmaps the page or large page at `address`.
void growable_range::unmap_unit(std::uintptr_t address, bool keep_handle) noexcept {
  const std::size_t first = slot_of(address);
  const bool large = large_[first];
  const std::size_t n = large ? large_pages_ : 1;
  const std::size_t bytes = n * page_size_;
  observers_.unmapping(address, bytes);
  vmm_->unmap(index_, reinterpret_cast<void*>(address), bytes);
  const auto h = pages_[first];
  for (std::size_t i = first; i < first + n; ++i) {
    pages_[i] = 0;
    large_[i] = false;
  }
  mapped_pages_ -= n;
  if (keep_handle) {
    (large ? spare_large_ : spare_pages_).push_back(h);  // room reserved by cut_out
  } else {
    vmm_->release(index_, h, bytes);
    reserved_.remove(bytes);
  }
}

// Adds an unmapped block, merged with unmapped neighbours.
void growable_range::add_unmapped(block* m) {
  if (block* prev = m->prev; prev != nullptr && prev->status == block_status::unmapped) {
    unmapped_.erase(prev);
    prev->size += m->size;
    unlink_from_segment(m);
    pools_.blocks().release(m);
    m = prev;
  }
  if (block* next = m->next; next != nullptr && next->status == block_status::unmapped) {
    unmapped_.erase(next);
    m->size += next->size;
    unlink_from_segment(next);
    pools_.blocks().release(next);
  }
  unmapped_.insert(m);
}

// A spare still mapped at a moving stretch becomes an orphan, released with
// it: its memory is not free before that.
void growable_range::release_spares() noexcept {
  if (spare_pages_.empty() && spare_large_.empty()) return;
  syncmem::detail::ignore_failure("releasing the spare pages of a growable range", [&] {  // fails: the device is gone
    device_guard guard{device_};
    auto let_go = [this](handle h, std::size_t bytes) {
      if (!moving_.empty() && still_mapped_elsewhere(h)) {
        orphans_.emplace_back(h, bytes);
        return;
      }
      vmm_->release(index_, h, bytes);
      reserved_.remove(bytes);
    };
    for (auto h : spare_pages_) let_go(h, page_size_);
    for (auto h : spare_large_) let_go(h, large_pages_ * page_size_);
  });
  spare_pages_.clear();
  spare_large_.clear();
}

template <class F>
void growable_range::for_each_mapped(F&& f) const {
  if (range_ == nullptr) return;
  for (std::size_t i = 0; i < pages_.size();) {
    if (pages_[i] == 0) {
      ++i;
      continue;
    }
    const std::size_t first = i;
    while (i < pages_.size() && pages_[i] != 0) ++i;
    f(range_->base + first * page_size_, (i - first) * page_size_);
  }
}

void growable_range::report_mapped(segment_observer& observer) const noexcept {
  for_each_mapped(
      [&](std::uintptr_t at, std::size_t bytes) { observer.range_mapped(reinterpret_cast<void*>(at), bytes); });
}

void growable_range::report_unmapping() const noexcept {
  for_each_mapped([&](std::uintptr_t at, std::size_t bytes) { observers_.unmapping(at, bytes); });
}

void growable_range::release_all() noexcept {
  if (range_ == nullptr) return;
  syncmem::detail::ignore_failure("releasing a growable range", [&] {  // fails: the device is gone
    (void)settle(/*device_idle=*/true);
    device_guard guard{device_};
    backend_.make_current(index_);
    for (std::size_t i = 0; i < pages_.size();) {
      const std::size_t n = large_[i] ? large_pages_ : 1;
      if (pages_[i] != 0) {
        vmm_->unmap(index_, reinterpret_cast<void*>(range_->base + i * page_size_), n * page_size_);
        vmm_->release(index_, pages_[i], n * page_size_);
      }
      i += n;
    }
    for (auto h : spare_pages_) vmm_->release(index_, h, page_size_);
    for (auto h : spare_large_) vmm_->release(index_, h, large_pages_ * page_size_);
    vmm_->free_address(index_, reinterpret_cast<void*>(range_->base), range_->size);
  });
}

}  // namespace syncmem::mr::detail::caching
